"""The ``tenet-byoc`` console entry: reads the command line without loading TVM.

``import tenet_byoc`` loads TVM and the C++ runtime (it registers the ``tenet`` codegen and
the loader of exported libraries), which takes seconds. This package holds what answering
``--help`` and refusing a bad name needs (the argument parser and the names a user may type)
and imports nothing from ``tenet_byoc``; :func:`main` hands a parsed command to
:mod:`tenet_byoc.experiments.cli`, which does the work.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tenet-byoc`` command line; return the exit code.

    ``--help``, a command's ``--help`` and mistakes in the options (unknown names, bad
    numbers) are answered here, before TVM is loaded. Mistakes found later (missing or broken
    files, lengths out of range, bad spec strings) print one line and exit with code 2
    (``SystemExit``), as argparse does for bad options.
    """
    import sys

    from .parser import build_parser, refusal

    parser = build_parser()
    args = parser.parse_args(argv)
    given = list(sys.argv[1:] if argv is None else argv)
    if (mistake := refusal(args, given)) is not None:
        parser.exit(2, f"tenet-byoc {args.command}: error: {mistake}\n")
    args.argv = given  # the run manifest records it
    if args.command is None:
        parser.print_help()
        return 0
    from tenet_byoc.experiments.cli import run_command

    try:
        return run_command(parser, args)
    except KeyboardInterrupt:
        # Ctrl-C: one line, no traceback; the files already written stay (dse's points.jsonl
        # resumes from them), a half-written table is not started.
        out = getattr(args, "out", None)
        kept = f"; what was written into {out!r} is kept" if out else ""
        sys.stderr.write(f"\ntenet-byoc {args.command}: interrupted{kept}\n")
        return 130
