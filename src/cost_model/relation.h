// The subset of isl's relation syntax that TENET's files use, parsed into expression
// trees that can be evaluated at integer points.
//
// Errors give the 0-based character offset of the offending token.
// Supported: "{ piece ; piece ... }" where a piece is "Name[v,...]" (a set) or
// "Name[v,...] -> Name[e,...]" (a map), optionally followed by ": constraints";
// constraints are comparison chains (<, <=, >, >=, =) joined by "and"; expressions are
// integers, variables, named parameters, + and -, * when one side is a constant,
// floor(e/c) and e%c (or "e mod c") with a positive constant c. An optional isl
// parameter prefix "[R, C] -> { ... }" is accepted; parameters take their values from the
// map given to ParseRelation.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tenet {
namespace detail {

struct ExprNode {
  enum Kind { kConst, kVar, kAdd, kSub, kNeg, kMulConst, kFloorDiv, kMod } kind = kConst;
  int64_t value = 0;  // kConst value, kMulConst/kFloorDiv/kMod constant
  int var = -1;       // kVar index into the input tuple
  int lhs = -1, rhs = -1;
};

class Expr {
 public:
  std::vector<ExprNode> nodes;
  int root = -1;
  int64_t Eval(const int64_t* vars) const { return EvalNode(root, vars); }
  const ExprNode& Root() const { return nodes[root]; }

 private:
  int64_t EvalNode(int i, const int64_t* vars) const;
};

struct Comparison {
  enum Op { kLT, kLE, kGT, kGE, kEQ } op;
  Expr lhs, rhs;
  bool Holds(const int64_t* vars) const;
};

struct Piece {
  std::string in_name;
  std::vector<std::string> in_vars;
  bool is_map = false;
  std::string out_name;
  std::vector<Expr> out;
  std::vector<Comparison> constraints;
  bool Holds(const int64_t* vars) const {
    for (const auto& c : constraints)
      if (!c.Holds(vars)) return false;
    return true;
  }
};

struct Relation {
  std::string text;
  std::vector<Piece> pieces;
  bool is_map = false;
  size_t in_arity = 0, out_arity = 0;
  std::string in_name, out_name;
  // Set: does the point belong to some piece?
  bool Contains(const int64_t* point) const;
  // Map: images of the point over all pieces whose constraints hold.
  void Apply(const int64_t* point, std::vector<std::vector<int64_t>>* out) const;
};

// The longest relation text accepted, in characters (bytes): TENET's relations are a few
// hundred; a text of megabytes took a minute and gigabytes to parse and evaluate.
constexpr int64_t kMaxRelationChars = 65536;

// `what` names the relation in error messages ("space map", "PE domain", ...). A text
// longer than kMaxRelationChars is refused before any parsing.
Relation ParseRelation(const std::string& text, const std::string& what,
                       const std::map<std::string, int64_t>& params = {});

// Bounds lo <= v < hi of every variable of a set, from its constraints that compare one
// variable with constants (after the others are ignored); throws if one is unbounded.
struct Box {
  std::vector<int64_t> lo, hi;  // hi exclusive
  int64_t Volume() const;
};
Box BoundingBox(const Relation& set, const std::string& what);

// Length of the well-formed UTF-8 character starting at s[i] (as Python's strict decoder
// accepts it: no overlong forms, no surrogates), or 0 if there is none.
size_t Utf8CharLength(const std::string& s, size_t i);
// Is the set a single piece whose constraints each bound one variable by a constant? Its
// box, when so.
bool IsBoxSet(const Relation& set, Box* box);
// The number of integer points of a bounded set.
int64_t CountPoints(const Relation& set, const std::string& what);

// Removes all whitespace (used to compare relation strings).
std::string Normalize(const std::string& s);

}  // namespace detail
}  // namespace tenet
