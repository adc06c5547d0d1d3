// Parser and evaluator for TENET's relation syntax (see relation.h for the grammar).
#include "cost_model/relation.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "cost_model/checked.h"

namespace tenet {
namespace detail {
namespace {

constexpr const char* kSupported =
    "supported: integer constants, variables, named parameters, + and -, * by an integer "
    "constant, floor(e/c) and e%c with a positive integer constant c, comparison chains "
    "joined by 'and'";

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t FloorMod(int64_t a, int64_t b) {
  int64_t r = a % b;  // never overflows, unlike a - FloorDiv(a, b) * b near INT64_MIN
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// Evaluation overflows throw std::overflow_error (CheckedAdd, CheckedMul); Relation::Contains
// / Apply, which know the relation and the point, turn it into a message naming both.
constexpr const char* kValue = "a relation's value";

[[noreturn]] void EvalOverflow(const Relation& rel, const int64_t* point) {
  std::string p;
  for (size_t d = 0; d < rel.in_arity; ++d) p += (d ? "," : "") + std::to_string(point[d]);
  throw std::invalid_argument("integer overflow evaluating relation '" + rel.text + "' at " +
                              rel.in_name + "[" + p + "]");
}

struct Token {
  enum Kind { kIdent, kInt, kSym, kEnd } kind;
  std::string text;
  size_t pos;
};

class Parser {
 public:
  Parser(const std::string& text, const std::string& what,
         const std::map<std::string, int64_t>& params)
      : text_(text), what_(what), params_(params) {
    Tokenize();
  }

  Relation Parse() {
    Relation rel;
    rel.text = text_;
    // Optional isl parameter prefix "[R, C] ->".
    if (Peek().text == "[") {
      Next();
      if (Peek().text != "]") {
        for (;;) {
          Token t = Expect(Token::kIdent, "a parameter name");
          if (!params_.count(t.text))
            Fail(t, "parameter '" + t.text + "' has no value (known parameters: " +
                        KnownParams() + ")");
          if (Peek().text == ",") { Next(); continue; }
          break;
        }
      }
      ExpectSym("]");
      ExpectSym("->");
    }
    ExpectSym("{");
    for (;;) {
      rel.pieces.push_back(ParsePiece());
      if (Peek().text == ";") { Next(); continue; }
      break;
    }
    ExpectSym("}");
    if (Peek().kind != Token::kEnd) Fail(Peek(), "expected end of relation after '}'");
    const Piece& first = rel.pieces.front();
    rel.is_map = first.is_map;
    rel.in_arity = first.in_vars.size();
    rel.out_arity = first.out.size();
    rel.in_name = first.in_name;
    rel.out_name = first.out_name;
    for (const Piece& p : rel.pieces) {
      if (p.is_map != rel.is_map || p.in_vars.size() != rel.in_arity ||
          p.out.size() != rel.out_arity || p.in_name != rel.in_name ||
          p.out_name != rel.out_name)
        throw std::invalid_argument(what_ + " '" + text_ +
                                    "': all ';'-separated pieces must have the same tuple "
                                    "names and arities");
    }
    return rel;
  }

 private:
  [[noreturn]] void Fail(const Token& t, const std::string& msg) const {
    std::ostringstream os;
    os << what_ << " '" << text_ << "': " << msg << " at position " << t.pos << " (token '"
       << (t.kind == Token::kEnd ? std::string("<end>") : t.text) << "')";
    throw std::invalid_argument(os.str());
  }
  std::string KnownParams() const {
    std::string s;
    for (const auto& kv : params_) s += (s.empty() ? "" : ", ") + kv.first;
    return s.empty() ? "none" : s;
  }

  void Tokenize() {
    size_t i = 0, n = text_.size();
    while (i < n) {
      char c = text_[i];
      if (std::isspace(static_cast<unsigned char>(c))) { ++i; continue; }
      size_t start = i;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        while (i < n && (std::isalnum(static_cast<unsigned char>(text_[i])) || text_[i] == '_' ||
                         text_[i] == '\''))
          ++i;
        tokens_.push_back({Token::kIdent, text_.substr(start, i - start), start});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        while (i < n && std::isdigit(static_cast<unsigned char>(text_[i]))) ++i;
        tokens_.push_back({Token::kInt, text_.substr(start, i - start), start});
      } else {
        static const char* two[] = {"->", "<=", ">=", "==", "&&"};
        std::string sym;
        for (const char* t : two)
          if (text_.compare(i, 2, t) == 0) sym = t;
        if (sym.empty()) {
          static const std::string one = "{}[](),;:+-*/%<>=";
          if (one.find(c) == std::string::npos) {
            // Show the whole character, not the first byte of a multi-byte one.
            const size_t len = std::max<size_t>(1, Utf8CharLength(text_, i));
            Token bad{Token::kSym, text_.substr(i, len), i};
            Fail(bad, "unexpected character");
          }
          sym = std::string(1, c);
        }
        i += sym.size();
        if (sym == "&&") sym = "and";
        if (sym == "==") sym = "=";
        tokens_.push_back({Token::kSym, sym, start});
      }
    }
    tokens_.push_back({Token::kEnd, "", n});
  }

  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  Token Next() {
    Token t = Peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  void ExpectSym(const std::string& s) {
    if (Peek().kind == Token::kIdent || Peek().text != s) Fail(Peek(), "expected '" + s + "'");
    Next();
  }
  Token Expect(Token::Kind k, const std::string& desc) {
    if (Peek().kind != k) Fail(Peek(), "expected " + desc);
    return Next();
  }
  bool IsKeyword(const Token& t, const char* kw) const {
    return t.kind == Token::kIdent && t.text == kw;
  }

  Piece ParsePiece() {
    Piece p;
    Token name = Expect(Token::kIdent, "a tuple name such as S or PE");
    p.in_name = name.text;
    ExpectSym("[");
    if (Peek().text != "]") {
      for (;;) {
        Token v = Expect(Token::kIdent, "a variable name");
        if (std::find(p.in_vars.begin(), p.in_vars.end(), v.text) != p.in_vars.end())
          Fail(v, "variable '" + v.text + "' repeated in the tuple");
        p.in_vars.push_back(v.text);
        if (Peek().text == ",") { Next(); continue; }
        break;
      }
    }
    ExpectSym("]");
    vars_ = &p.in_vars;
    if (Peek().text == "->") {
      Next();
      p.is_map = true;
      p.out_name = Expect(Token::kIdent, "a tuple name such as PE or T").text;
      ExpectSym("[");
      if (Peek().text != "]") {
        for (;;) {
          p.out.push_back(ParseExpr());
          if (Peek().text == ",") { Next(); continue; }
          break;
        }
      }
      ExpectSym("]");
    }
    if (Peek().text == ":") {
      Next();
      for (;;) {
        ParseChain(&p.constraints);
        if (IsKeyword(Peek(), "and") || Peek().text == "and") { Next(); continue; }
        if (IsKeyword(Peek(), "or")) Fail(Peek(), std::string("'or' is not supported (") +
                                                      kSupported + "; use ';' pieces)");
        break;
      }
    }
    vars_ = nullptr;
    return p;
  }

  void ParseChain(std::vector<Comparison>* out) {
    Expr lhs = ParseExpr();
    int n = 0;
    for (;;) {
      const Token& t = Peek();
      Comparison::Op op;
      if (t.text == "<") op = Comparison::kLT;
      else if (t.text == "<=") op = Comparison::kLE;
      else if (t.text == ">") op = Comparison::kGT;
      else if (t.text == ">=") op = Comparison::kGE;
      else if (t.text == "=") op = Comparison::kEQ;
      else break;
      if (t.kind != Token::kSym) break;
      Next();
      Expr rhs = ParseExpr();
      out->push_back(Comparison{op, lhs, rhs});
      lhs = rhs;
      ++n;
    }
    if (n == 0) Fail(Peek(), "expected a comparison (<, <=, >, >=, =)");
  }

  // Expression trees are built in a scratch vector and then copied into an Expr.
  Expr ParseExpr() {
    scratch_.clear();
    int root = ParseSum();
    Expr e;
    e.nodes = scratch_;
    e.root = root;
    return e;
  }

  int Add(ExprNode n) {
    if (scratch_.size() >= kMaxNodes)
      Fail(Peek(), "expression too long (more than " + std::to_string(kMaxNodes) + " terms)");
    scratch_.push_back(n);
    return static_cast<int>(scratch_.size()) - 1;
  }
  bool IsConst(int i) const { return scratch_[i].kind == ExprNode::kConst; }
  int64_t ConstVal(int i) const { return scratch_[i].value; }
  int MakeConst(int64_t v) {
    ExprNode n;
    n.kind = ExprNode::kConst;
    n.value = v;
    return Add(n);
  }

  int ParseSum() {
    int lhs = ParseTerm();
    for (;;) {
      const Token& t = Peek();
      if (t.kind != Token::kSym || (t.text != "+" && t.text != "-")) break;
      bool plus = t.text == "+";
      const Token op = t;
      Next();
      int rhs = ParseTerm();
      if (IsConst(lhs) && IsConst(rhs)) {
        // Folded with the same overflow check as the evaluated form (negating INT64_MIN
        // first would itself overflow).
        int64_t r;
        if (plus ? __builtin_add_overflow(ConstVal(lhs), ConstVal(rhs), &r)
                 : __builtin_sub_overflow(ConstVal(lhs), ConstVal(rhs), &r))
          Fail(op, "integer overflow in constant arithmetic");
        lhs = MakeConst(r);
      } else {
        ExprNode n;
        n.kind = plus ? ExprNode::kAdd : ExprNode::kSub;
        n.lhs = lhs;
        n.rhs = rhs;
        lhs = Add(n);
      }
    }
    return lhs;
  }

  int ParseTerm() {
    int lhs = ParseUnary();
    for (;;) {
      const Token& t = Peek();
      bool implicit = false;
      // isl writes "2i" for 2*i: an integer immediately followed by a variable or '('.
      if (IsConst(lhs) && (t.kind == Token::kIdent && !IsKeyword(t, "and") &&
                           !IsKeyword(t, "mod") && !IsKeyword(t, "or")))
        implicit = true;
      bool is_mod = IsKeyword(t, "mod") || (t.kind == Token::kSym && t.text == "%");
      if (!implicit && !is_mod && !(t.kind == Token::kSym && (t.text == "*" || t.text == "/")))
        break;
      if (t.text == "/" && t.kind == Token::kSym && in_floor_) break;  // floor(e/c)'s '/'
      Token op = t;
      if (!implicit) Next();
      if (op.text == "/")
        Fail(op, std::string("division is supported only as floor(e/c) (") + kSupported + ")");
      int rhs = ParseUnary();
      if (is_mod) {
        if (!IsConst(rhs) || ConstVal(rhs) <= 0)
          Fail(op, std::string("'%' needs a positive integer constant on its right (") +
                       kSupported + ")");
        if (IsConst(lhs)) {
          lhs = MakeConst(FloorMod(ConstVal(lhs), ConstVal(rhs)));
        } else {
          ExprNode n;
          n.kind = ExprNode::kMod;
          n.lhs = lhs;
          n.value = ConstVal(rhs);
          lhs = Add(n);
        }
        continue;
      }
      // multiplication
      if (IsConst(lhs) && IsConst(rhs)) {
        int64_t r;
        if (__builtin_mul_overflow(ConstVal(lhs), ConstVal(rhs), &r))
          Fail(op, "integer overflow in constant arithmetic");
        lhs = MakeConst(r);
      } else if (IsConst(lhs) || IsConst(rhs)) {
        ExprNode n;
        n.kind = ExprNode::kMulConst;
        n.value = IsConst(lhs) ? ConstVal(lhs) : ConstVal(rhs);
        n.lhs = IsConst(lhs) ? rhs : lhs;
        lhs = Add(n);
      } else {
        Fail(op, std::string("non-affine product of two non-constant expressions (") +
                     kSupported + ")");
      }
    }
    return lhs;
  }

  int ParseUnary() {
    // Bounded nesting keeps the recursive descent (and evaluation) off the stack's limit.
    struct Depth {
      int& d;
      explicit Depth(int& x) : d(x) { ++d; }
      ~Depth() { --d; }
    } guard(depth_);
    if (depth_ > kMaxDepth) Fail(Peek(), "expression nested too deeply");
    const Token& t = Peek();
    if (t.kind == Token::kSym && t.text == "-") {
      const Token op = t;
      Next();
      int e = ParseUnary();
      if (IsConst(e)) {
        int64_t r;
        if (__builtin_mul_overflow(int64_t(-1), ConstVal(e), &r))
          Fail(op, "integer overflow in constant arithmetic");
        return MakeConst(r);
      }
      ExprNode n;
      n.kind = ExprNode::kNeg;
      n.lhs = e;
      return Add(n);
    }
    if (t.kind == Token::kSym && t.text == "+") {
      Next();
      return ParseUnary();
    }
    return ParsePrimary();
  }

  int ParsePrimary() {
    Token t = Peek();
    if (t.kind == Token::kInt) {
      Next();
      int64_t v = 0;
      for (char c : t.text) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, c - '0', &v))
          Fail(t, "integer constant too large");
      }
      return MakeConst(v);
    }
    if (t.kind == Token::kSym && t.text == "(") {
      Next();
      bool saved = in_floor_;
      in_floor_ = false;
      int e = ParseSum();
      in_floor_ = saved;
      ExpectSym(")");
      return e;
    }
    if (t.kind == Token::kIdent) {
      if (t.text == "floor") {
        Next();
        ExpectSym("(");
        bool saved = in_floor_;
        in_floor_ = true;
        int num = ParseSum();
        in_floor_ = saved;
        if (!(Peek().kind == Token::kSym && Peek().text == "/"))
          Fail(Peek(), "expected '/' inside floor(e/c)");
        Token slash = Next();
        in_floor_ = false;
        int den = ParseSum();
        in_floor_ = saved;
        ExpectSym(")");
        if (!IsConst(den) || ConstVal(den) <= 0)
          Fail(slash, std::string("floor(e/c) needs a positive integer constant c (") +
                          kSupported + ")");
        if (IsConst(num)) return MakeConst(FloorDiv(ConstVal(num), ConstVal(den)));
        ExprNode n;
        n.kind = ExprNode::kFloorDiv;
        n.lhs = num;
        n.value = ConstVal(den);
        return Add(n);
      }
      if (t.text == "and" || t.text == "or" || t.text == "mod")
        Fail(t, "expected an expression");
      Next();
      if (Peek().kind == Token::kSym && Peek().text == "(")
        Fail(t, "unknown function '" + t.text + "' (" + kSupported + ")");
      if (vars_) {
        auto it = std::find(vars_->begin(), vars_->end(), t.text);
        if (it != vars_->end()) {
          ExprNode n;
          n.kind = ExprNode::kVar;
          n.var = static_cast<int>(it - vars_->begin());
          return Add(n);
        }
      }
      auto p = params_.find(t.text);
      if (p != params_.end()) return MakeConst(p->second);
      Fail(t, "unknown identifier '" + t.text +
                  "' (not a variable of the input tuple nor a known parameter: " +
                  KnownParams() + ")");
    }
    Fail(t, "expected an expression");
  }

  const std::string& text_;
  std::string what_;
  const std::map<std::string, int64_t>& params_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  const std::vector<std::string>* vars_ = nullptr;
  std::vector<ExprNode> scratch_;
  bool in_floor_ = false;
  int depth_ = 0;
  static constexpr size_t kMaxNodes = 4096;
  static constexpr int kMaxDepth = 200;
};

}  // namespace

int64_t Expr::EvalNode(int i, const int64_t* vars) const {
  // Checked arithmetic: a relation whose values leave int64 is an error, not a wrong count.
  const ExprNode& n = nodes[i];
  switch (n.kind) {
    case ExprNode::kConst: return n.value;
    case ExprNode::kVar: return vars[n.var];
    case ExprNode::kAdd: return CheckedAdd(EvalNode(n.lhs, vars), EvalNode(n.rhs, vars), kValue);
    case ExprNode::kSub: {
      int64_t r;
      if (__builtin_sub_overflow(EvalNode(n.lhs, vars), EvalNode(n.rhs, vars), &r))
        throw std::overflow_error("integer overflow");
      return r;
    }
    case ExprNode::kNeg: return CheckedMul(-1, EvalNode(n.lhs, vars), kValue);
    case ExprNode::kMulConst: return CheckedMul(n.value, EvalNode(n.lhs, vars), kValue);
    case ExprNode::kFloorDiv: return FloorDiv(EvalNode(n.lhs, vars), n.value);
    case ExprNode::kMod: return FloorMod(EvalNode(n.lhs, vars), n.value);
  }
  return 0;
}

bool Comparison::Holds(const int64_t* vars) const {
  int64_t a = lhs.Eval(vars), b = rhs.Eval(vars);
  switch (op) {
    case kLT: return a < b;
    case kLE: return a <= b;
    case kGT: return a > b;
    case kGE: return a >= b;
    case kEQ: return a == b;
  }
  return false;
}

bool Relation::Contains(const int64_t* point) const {
  try {
    for (const Piece& p : pieces)
      if (p.Holds(point)) return true;
  } catch (const std::overflow_error&) {
    EvalOverflow(*this, point);
  }
  return false;
}

void Relation::Apply(const int64_t* point, std::vector<std::vector<int64_t>>* out) const {
  out->clear();
  try {
    for (const Piece& p : pieces) {
      if (!p.Holds(point)) continue;
      std::vector<int64_t> img(p.out.size());
      for (size_t d = 0; d < p.out.size(); ++d) img[d] = p.out[d].Eval(point);
      if (std::find(out->begin(), out->end(), img) == out->end()) out->push_back(std::move(img));
    }
  } catch (const std::overflow_error&) {
    EvalOverflow(*this, point);
  }
}

Relation ParseRelation(const std::string& text, const std::string& what,
                       const std::map<std::string, int64_t>& params) {
  if (static_cast<int64_t>(text.size()) > kMaxRelationChars)
    throw std::invalid_argument(what + " is " + Str(static_cast<int64_t>(text.size())) +
                                " characters of relation text; at most " + Str(kMaxRelationChars) +
                                " are accepted");
  Parser parser(text, what, params);
  return parser.Parse();
}

int64_t Box::Volume() const {
  int64_t v = 1;
  for (size_t d = 0; d < lo.size(); ++d) {
    int64_t ext;
    if (__builtin_sub_overflow(hi[d], lo[d], &ext) || __builtin_mul_overflow(v, std::max<int64_t>(0, ext), &v))
      throw std::invalid_argument("box volume overflows int64");
  }
  return v;
}

Box BoundingBox(const Relation& set, const std::string& what) {
  const size_t n = set.in_arity;
  const int64_t kInf = std::numeric_limits<int64_t>::max();
  Box box;
  box.lo.assign(n, kInf);
  box.hi.assign(n, -kInf);
  for (const Piece& p : set.pieces) {
    std::vector<int64_t> lo(n, -kInf), hi(n, kInf);
    for (const Comparison& c : p.constraints) {
      const ExprNode& l = c.lhs.Root();
      const ExprNode& r = c.rhs.Root();
      int var;
      int64_t k;
      Comparison::Op op = c.op;
      if (l.kind == ExprNode::kVar && r.kind == ExprNode::kConst) {
        var = l.var;
        k = r.value;
      } else if (r.kind == ExprNode::kVar && l.kind == ExprNode::kConst) {
        var = r.var;
        k = l.value;
        switch (op) {  // mirror: k op v  ==  v op' k
          case Comparison::kLT: op = Comparison::kGT; break;
          case Comparison::kLE: op = Comparison::kGE; break;
          case Comparison::kGT: op = Comparison::kLT; break;
          case Comparison::kGE: op = Comparison::kLE; break;
          case Comparison::kEQ: break;
        }
      } else {
        continue;  // other constraints only filter points inside the box
      }
      // kInf stands for "no bound" below, so a bound at the edge of int64 is refused by name.
      if (k >= kInf - 1 || k <= -kInf)
        throw std::invalid_argument(what + " '" + set.text + "': bound " + std::to_string(k) +
                                    " of variable '" + p.in_vars[var] +
                                    "' is outside the supported range (-2^63, 2^63 - 2)");
      switch (op) {
        case Comparison::kLT: hi[var] = std::min(hi[var], k); break;
        case Comparison::kLE: hi[var] = std::min(hi[var], k == kInf ? k : k + 1); break;
        case Comparison::kGT: lo[var] = std::max(lo[var], k == kInf ? k : k + 1); break;
        case Comparison::kGE: lo[var] = std::max(lo[var], k); break;
        case Comparison::kEQ:
          lo[var] = std::max(lo[var], k);
          hi[var] = std::min(hi[var], k == kInf ? k : k + 1);
          break;
      }
    }
    for (size_t d = 0; d < n; ++d) {
      if (lo[d] == -kInf || hi[d] == kInf)
        throw std::invalid_argument(what + " '" + set.text + "': variable '" + p.in_vars[d] +
                                    "' has no constant lower and upper bound (a bounded box "
                                    "such as 0<=" + p.in_vars[d] + "<8 is required)");
      box.lo[d] = std::min(box.lo[d], lo[d]);
      box.hi[d] = std::max(box.hi[d], hi[d]);
    }
  }
  return box;
}

size_t Utf8CharLength(const std::string& s, size_t i) {
  auto byte = [&](size_t j) { return j < s.size() ? static_cast<unsigned char>(s[j]) : 0u; };
  const unsigned c = byte(i);
  if (c < 0x80) return 1;
  size_t len;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t j = 2; j < len; ++j)
    if ((byte(i + j) & 0xC0) != 0x80) return 0;
  return len;
}

std::string Normalize(const std::string& s) {
  std::string out;
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) out += c;
  return out;
}

// Is the relation a single unconstrained-or-box piece? Returns its box if so.
bool IsBoxSet(const Relation& set, Box* box) {
  if (set.pieces.size() != 1) return false;
  for (const auto& c : set.pieces[0].constraints) {
    bool lv = c.lhs.Root().kind == ExprNode::kVar, rv = c.rhs.Root().kind == ExprNode::kVar;
    bool lc = c.lhs.Root().kind == ExprNode::kConst, rc = c.rhs.Root().kind == ExprNode::kConst;
    if (!((lv && rc) || (lc && rv))) return false;
  }
  *box = BoundingBox(set, "set");
  return true;
}

int64_t CountPoints(const Relation& set, const std::string& what) {
  Box box = BoundingBox(set, what);
  Box exact;
  if (IsBoxSet(set, &exact)) return exact.Volume();
  if (box.Volume() == 0) return 0;
  int64_t count = 0;
  std::vector<int64_t> pt(box.lo);
  for (;;) {
    if (set.Contains(pt.data())) ++count;
    size_t d = pt.size();
    for (;;) {
      if (d == 0) return count;
      --d;
      if (++pt[d] < box.hi[d]) break;
      pt[d] = box.lo[d];
    }
  }
}

}  // namespace detail
}  // namespace tenet
