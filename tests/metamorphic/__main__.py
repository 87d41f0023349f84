"""`python tests/metamorphic KIND SRC [DST]`: SRC copied and transformed (KIND: locals,
parameters, moved), both analysed in-process, the differences printed per original file (exit 1
when there are some). `python tests/metamorphic blame KIND FILE [UNIT]`: which single rename
(KIND: locals, parameters) changes FILE's findings, in a copy of UNIT (default: FILE's top-level
package, or FILE alone)."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `tests/`, for `import metamorphic`
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for `import kllint`

from metamorphic.blame import blame  # noqa: E402
from metamorphic.corpus import (analyse, compare, copy_corpus, with_definitions_moved, with_locals_renamed,  # noqa: E402
                                with_parameters_renamed)

KINDS = {"locals": with_locals_renamed, "parameters": with_parameters_renamed, "moved": with_definitions_moved}


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "blame" and argv[1] in ("locals", "parameters"):
        found = blame(Path(argv[2]), argv[1], Path(argv[3]) if len(argv) > 3 else None)
        for name, differences in found:
            verb = "undoes" if name.startswith("all but") else "alone gives"
            print(f"renaming {name} {verb}:\n{differences.report()}")
        return 1 if found else 0
    if len(argv) not in (2, 3) or argv[0] not in KINDS:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        target = Path(argv[2]) if len(argv) == 3 else Path(folder)
        original = copy_corpus(Path(argv[1]), target / "original")
        copy = KINDS[argv[0]](original, target / argv[0])
        for name, why in sorted(copy.broken.items()):
            print(f"BROKEN {name}: {why}")
        for name, why in sorted(copy.skipped.items()):
            print(f"kept as it is: {name}: {why}")
        differences = compare(analyse(original), analyse(copy))
        print(f"{len(differences.lost)} findings lost, {len(differences.gained)} gained")
        print(differences.report())
        return 1 if differences or copy.broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
