"""An import-linter contract type: "package P may import only these parts of the project".

import-linter's built-in `forbidden` contract lists what is banned; the layering rule of
DESIGN.md is an allow-list ("runtime imports only compiler/program.py of the compiler"), which
must also hold for modules added later. Only direct imports are checked: an allowed module may
itself import more (program.py imports the IR it describes).
"""

from __future__ import annotations

from importlinter import Contract, ContractCheck, fields, output


class AllowListContract(Contract):
    """Direct imports from `source` into `root` must fall under one of `allowed`."""

    source = fields.StringField()
    root = fields.StringField()
    allowed = fields.ListField(subfield=fields.StringField())

    def check(self, graph, verbose: bool) -> ContractCheck:
        source, root = str(self.source), str(self.root)
        allowed = [str(a) for a in self.allowed]
        violations: list[str] = []
        if source not in graph.modules:  # the package does not exist yet: nothing to break
            return ContractCheck(kept=True, metadata={"violations": violations})
        for importer in sorted(graph.find_descendants(source) | {source}):
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                if not _within(imported, root) or any(_within(imported, a) for a in allowed):
                    continue
                details = graph.get_import_details(importer=importer, imported=imported)
                lines = [f"{d['line_number']}" for d in details]
                violations.append(f"{importer} (line {', '.join(lines)}) imports {imported}")
        return ContractCheck(kept=not violations, metadata={"violations": violations})

    def render_broken_contract(self, check: ContractCheck) -> None:
        allowed = ", ".join(str(a) for a in self.allowed)
        output.print_error(f"{self.source} may import only {allowed} of {self.root}:")
        for violation in check.metadata["violations"]:
            output.indent_cursor()
            output.print_error(violation)
            output.new_line()


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")
