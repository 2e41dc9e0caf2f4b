"""The command line: help for every verb, one-line errors with exit code 2."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from rlsys.cli import main

VERBS = ["train", "profile", "sweep", "report", "bench"]
SEEDED = {"train", "sweep", "bench"}


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_help_with_the_common_options(verb: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([verb, "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--out", "--quiet"):
        assert option in text
    # --seed where the verb draws random numbers itself; a profiled script draws its own
    assert bool(re.search(r"^\s+--seed", text, re.MULTILINE)) == (verb in SEEDED)


@pytest.mark.parametrize("verb", ["sweep"])
def test_unbuilt_verbs_say_so_and_exit_2(verb: str, capsys) -> None:
    assert main([verb]) == 2
    err = capsys.readouterr().err
    assert f"`rlsys {verb}` is not built yet" in err
    assert "hint:" in err


def test_unknown_option_is_one_line_and_exit_2(capsys) -> None:
    assert main(["bench", "--frobnicate"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("error: ") and "--frobnicate" in err[0]
    assert err[1].startswith("hint: ")
    assert len(err) == 2


@pytest.mark.parametrize(
    ("argv", "prog"),
    [(["train", "ppo", "--bogus"], "rlsys train"), (["bench", "run", "x", "--bogus"],
     "rlsys bench run"), (["profile", "--bogus", "--", "true"], "rlsys profile"),
     (["--bogus"], "rlsys")],
)  # fmt: skip
def test_an_unknown_option_is_named_by_the_verb_that_does_not_know_it(argv, prog, capsys) -> None:
    # It was always "rlsys: unrecognized arguments", with the hint `rlsys --help`.
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {prog}: unrecognized arguments: --bogus", f"hint: see `{prog} --help`"]


def test_unknown_verb_and_wrong_type_exit_2(capsys) -> None:
    assert main(["fly"]) == 2
    assert main(["train", "--seed", "abc"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'fly'" in err
    assert "invalid int value: 'abc'" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("value", ["-1e-3", "-inf", "-Infinity", "-.5", "-2", "-nan"])
def test_a_negative_number_is_a_value_not_an_option(value: str, capsys) -> None:
    assert main(["train", "ppo", "--learning-rate", value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --learning-rate "), err  # refused by its range, as a value
    assert "expected one argument" not in err


@pytest.mark.parametrize(
    "argv",
    [["train", "ppo", "--compile-cache", ""], ["profile", "--out", "", "--", "true"],
     ["eval", "runs/x", "--compile-cache", " "], ["train", "ppo", "--out", ""]],
)  # fmt: skip
def test_an_empty_folder_option_is_refused_not_the_working_folder(argv, capsys) -> None:
    assert main(argv) == 2
    assert "an empty path; give a folder" in capsys.readouterr().err


def test_console_script_runs_as_a_process() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rlsys.cli", "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    for verb in VERBS:
        assert verb in result.stdout


def test_profile_and_report_start_without_importing_jax(tmp_path) -> None:
    """JAX's import (about 2 s, for the --compile-cache help) delayed every `rlsys profile`
    and `rlsys report`, and was where an early Ctrl-C got lost."""
    code = (
        "import sys\n"
        "from rlsys.cli import main\n"
        "assert main(['report', 'no-such-folder']) == 2\n"
        "assert main(['profile', '--', 'rlsys-no-such-command']) == 2\n"
        "print(sorted(m for m in ('jax', 'rlsys.compiler') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
