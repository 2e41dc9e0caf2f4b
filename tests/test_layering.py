"""The import-layering rule of DESIGN.md: the contract holds here and catches a violation."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path, *extra_path: Path) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(str(p) for p in (REPO / "tools", *extra_path))
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True,
        check=False,
    )  # fmt: skip


def test_rlsys_keeps_its_layering() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_the_contract_reports_a_runtime_import_of_compiler_internals(tmp_path: Path) -> None:
    files = {
        "fake/__init__.py": "",
        "fake/compiler/__init__.py": "",
        "fake/compiler/program.py": "from fake.compiler import ir\n",
        "fake/compiler/ir.py": "",
        "fake/runtime/__init__.py": "",
        "fake/runtime/ok.py": "from fake.compiler import program\n",
        "fake/runtime/bad.py": "import fake.compiler.program\nfrom fake.compiler.ir import X\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / ".importlinter").write_text(
        textwrap.dedent(
            """
            [importlinter]
            root_package = fake
            contract_types =
                allowlist: layering_contract.AllowListContract
            [importlinter:contract:runtime]
            name = runtime imports only compiler.program
            type = allowlist
            source = fake.runtime
            root = fake.compiler
            allowed =
                fake.compiler.program
            """
        )
    )
    result = lint_imports(tmp_path, tmp_path)
    assert result.returncode != 0
    assert "fake.runtime.bad (line 2) imports fake.compiler.ir" in result.stdout
    assert "fake.runtime.ok" not in result.stdout
