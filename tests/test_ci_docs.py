"""docs/ci.md stays true: its example prints the summary it shows, and its CI jobs' steps run as written.

The jobs' shell steps are taken from the page's YAML and run with the shell
each CI gives them (GitHub Actions: ``bash --noprofile --norc -eo pipefail``;
GitLab: bash, stopping at the first failure), in a folder holding what the
earlier steps would have left (the profile, the config). ``gh`` and ``curl``
are stand-ins that check they are called as their manuals say
(``gh run list --json databaseId --jq``, ``gh run download RUN --name N
--dir D``; ``curl --output FILE --header H URL``) and hand over the default
branch's ``check.json`` as its artifact.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")


def _block(after: str, language: str) -> str:
    """The first fenced block of ``language`` after the heading ``after``."""
    section = PAGE.split(after, 1)[1]
    found = re.search(rf"```{language}\n(.*?)```", section, flags=re.S)
    assert found is not None, after
    return found.group(1)


def _bin(folder: Path, **scripts: str) -> Path:
    """A folder of executables: ``popliner`` and ``python`` from this checkout, and the given stand-ins."""
    folder.mkdir(exist_ok=True)
    programs = {"popliner": f'#!/bin/sh\nexec "{sys.executable}" -m popliner "$@"\n',
                "python": f'#!/bin/sh\nexec "{sys.executable}" "$@"\n', **scripts}
    for name, text in programs.items():
        path = folder / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return folder


def _env(bin_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CI_"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", PYTHONPATH=str(ROOT), **extra)
    return env


def _run(script: str, cwd: Path, env: dict[str, str], shell: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    path = cwd.parent / f"{cwd.name}-step.sh"
    path.write_text(script)
    return subprocess.run([*shell, str(path)], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The default branch's profile and config, and a pull request's profile of a longer sequence."""
    folder = tmp_path_factory.mktemp("profiles")
    env = _env(_bin(folder / "bin"))
    for args in (["synth", "--preset", "bert-tiny", "-o", "main.json.gz"],
                 ["synth", "--preset", "bert-tiny", "--seq", "160", "-o", "pr.json.gz"],
                 ["main.json.gz", "--solve", "--num-ipus", "2", "--config-out", "pipeline.yaml", "-q"]):
        subprocess.run(["popliner", *args], cwd=folder, env=env, check=True, capture_output=True)
    return {"main": folder / "main.json.gz", "pr": folder / "pr.json.gz", "config": folder / "pipeline.yaml"}


def _workspace(tmp_path: Path, name: str, profiles: dict[str, Path], which: str) -> Path:
    """What the checkout and the build step leave: the config and the profile."""
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(profiles["config"], folder / "pipeline.yaml")
    shutil.copy(profiles[which], folder / "model.json.gz")
    return folder


@pytest.mark.slow  # a long case (about 4 s)
def test_the_example_prints_the_summary_the_page_shows(tmp_path: Path) -> None:
    commands = _block("## An example", "sh")
    r = _run(commands, tmp_path, _env(_bin(tmp_path.parent / f"{tmp_path.name}-bin")), ("bash",))
    assert r.returncode == 1, r.stderr  # the last command: growth beyond --max-growth 0.01
    shown = PAGE.split("<!-- summary.md begins -->\n", 1)[1].split("<!-- summary.md ends -->", 1)[0]
    assert (tmp_path / "summary.md").read_text() == shown


# ------------------------------------------------------------------------------------------ GitHub Actions


def _gh(artifact: Path) -> str:
    """A stand-in for the GitHub CLI: the two calls the job makes, each checked, nothing else."""
    return f"""#!{sys.executable}
import shutil, sys
args = sys.argv[1:]
if args[:2] == ["run", "list"]:
    assert args[2:] == ["--workflow", "memory budget", "--branch", "main", "--event", "push", "--status", "success",
                        "--limit", "1", "--json", "databaseId", "--jq", ".[0].databaseId"], args
    print("4242")
elif args[:2] == ["run", "download"]:
    assert args[2:] == ["4242", "--name", "popliner-check", "--dir", "baseline"], args
    import os
    os.makedirs("baseline", exist_ok=True)
    shutil.copy({str(artifact)!r}, "baseline/check.json")
else:
    sys.exit("gh stand-in: unexpected " + " ".join(args))
"""


def _github_steps() -> dict[str, dict[str, Any]]:
    job = yaml.safe_load(_block("## A GitHub Actions job", "yaml"))["jobs"]["memory-budget"]
    return {step.get("name", step.get("uses")): step for step in job["steps"]}


def _github_env(step: dict[str, Any], values: dict[str, str]) -> dict[str, str]:
    """A step's ``env:`` with its ``${{ ... }}`` expressions as the runner fills them in."""
    env = {}
    for key, value in step.get("env", {}).items():
        for expression, filled in values.items():
            value = value.replace("${{ " + expression + " }}", filled)
        assert "${{" not in value, value
        env[key] = value
    return env


GITHUB_BASH = ("bash", "--noprofile", "--norc", "-eo", "pipefail")


def test_the_github_actions_job_runs_as_written(profiles: dict[str, Path], tmp_path: Path) -> None:
    steps = _github_steps()
    check, download = steps["Check the memory budget"], steps["Download the base branch's result"]
    assert "${{" not in check["run"] + download["run"]  # the scripts take expressions through env only
    assert steps["Keep the result for pull requests"]["with"] == {"name": "popliner-check", "path": "check.json"}
    # The default branch's run (a push): no baseline yet; the result becomes the artifact.
    main = _workspace(tmp_path, "main", profiles, "main")
    summary = tmp_path / "main-summary.md"
    summary.write_text("")
    bin_dir = _bin(tmp_path / "bin", gh=_gh(main / "check.json"))
    env = _env(bin_dir, GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(summary))
    r = _run(check["run"], main, env, GITHUB_BASH)
    assert r.returncode == 0, r.stderr
    assert (main / "check.json").is_file() and (main / "check.xml").is_file()
    assert summary.read_text().startswith("## PASS: popliner check of `pipeline.yaml`")
    # A pull request's run, whose model has a longer sequence.
    pr = _workspace(tmp_path, "pr", profiles, "pr")
    pr_summary = tmp_path / "pr-summary.md"
    pr_summary.write_text("")
    github = {"github.token": "t0ken", "github.workflow": "memory budget", "github.base_ref": "main"}
    env = _env(bin_dir, GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(pr_summary))
    r = _run(download["run"], pr, env | _github_env(download, github), GITHUB_BASH)
    assert r.returncode == 0, r.stderr
    assert (pr / "baseline" / "check.json").read_bytes() == (main / "check.json").read_bytes()
    r = _run(check["run"], pr, env, GITHUB_BASH)
    assert r.returncode == 1, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("::error file=pipeline.yaml,")]
    assert [e.split("::", 2)[1] for e in errors] == [
        f"error file=pipeline.yaml,title=popliner check%3A IPU {k} grew beyond the limit" for k in (0, 1)]
    assert r.stderr.splitlines()[-1].startswith("popliner: IPU 0 grew by ")
    assert pr_summary.read_text().startswith("## FAIL: popliner check of `pipeline.yaml`")


# ------------------------------------------------------------------------------------------ GitLab CI


def _curl(artifact: Path, url: str) -> str:
    """A stand-in for curl: the one call the job makes; answers with the artifact's zip, as GitLab's API does."""
    return f"""#!{sys.executable}
import sys, zipfile
args = sys.argv[1:]
assert args == ["--fail", "--silent", "--location", "--output", "baseline.zip", "--header", "JOB-TOKEN: t0ken",
                {url!r}], args
with zipfile.ZipFile("baseline.zip", "w") as z:
    z.write({str(artifact)!r}, "check.json")
"""


def test_the_gitlab_ci_job_runs_as_written(profiles: dict[str, Path], tmp_path: Path) -> None:
    job = yaml.safe_load(_block("## A GitLab CI job", "yaml"))["memory-budget"]
    script = job["script"][2]  # after installing popliner and building the profile
    assert job["script"][:2] == ["pip install popliner", "./build-profile.sh model.json.gz"]
    assert job["artifacts"]["paths"] == ["check.json"] and job["artifacts"]["reports"]["junit"] == "check.xml"
    gitlab_bash = ("bash", "-eo", "pipefail")
    # The default branch's pipeline: no merge request, no baseline.
    main = _workspace(tmp_path, "main", profiles, "main")
    api = "https://gitlab.example.com/api/v4"
    url = f"{api}/projects/7/jobs/artifacts/main/download?job=memory-budget"
    bin_dir = _bin(tmp_path / "bin", curl=_curl(main / "check.json", url))
    common = {"CI_JOB_TOKEN": "t0ken", "CI_API_V4_URL": api, "CI_PROJECT_ID": "7", "CI_JOB_NAME": "memory-budget"}
    r = _run(script, main, _env(bin_dir, **common), gitlab_bash)
    assert r.returncode == 0, r.stderr
    assert not (main / "baseline.zip").exists() and (main / "check.json").is_file()
    # A merge request into main, whose model has a longer sequence.
    pr = _workspace(tmp_path, "mr", profiles, "pr")
    r = _run(script, pr, _env(bin_dir, CI_MERGE_REQUEST_TARGET_BRANCH_NAME="main", **common), gitlab_bash)
    assert r.returncode == 1, r.stderr
    assert (pr / "baseline" / "check.json").read_bytes() == (main / "check.json").read_bytes()
    assert "more than --max-growth 0.01 allows" in r.stderr.splitlines()[-1]
    suite = ET.parse(pr / "check.xml").getroot()  # the report GitLab reads
    assert suite.get("failures") == "2"
