"""The commands of docs/cli.md, docs/onnx.md, the README and docs/python.md run as written (issue 11: "every command in
them runs"), in a scratch folder whose graphs/ is the repository's. `$A` and `attngraph` are
the CLI under test; a synopsis line (with [optional] parts) runs with those parts left out.
Each command must exit 0; what it prints is checked by the CLI tests, here only that the files
it says it writes exist."""
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import SOURCE


def sh_lines(markdown):
    """The command lines of a page's ```sh blocks, comments and heredocs kept whole."""
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", markdown, re.S):
        rows = iter(block.splitlines())
        for row in rows:
            if "<<'PY'" in row:  # a heredoc: the row and its body up to PY, as one command
                body = [row]
                for more in rows:
                    body.append(more)
                    if more == "PY":
                        break
                lines.append("\n".join(body))
            elif row.strip() and not row.startswith("#"):
                lines.append(row)
    return lines


def without_comment_and_options(line):
    line = re.sub(r"\s+#.*$", "", line)  # a trailing comment
    line = re.sub(r"\s*\[[^\]]*\](\.\.\.)?", "", line)  # [optional] parts of a synopsis
    return line.strip()


def run(command, cwd, cli):
    env = dict(os.environ, A=cli)
    script = f'A={shlex.quote(cli)}\nattngraph() {{ "$A" "$@"; }}\n{command}\n'
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture
def scratch(tmp_path):
    (tmp_path / "graphs").symlink_to(SOURCE / "graphs")
    return tmp_path


def test_every_attngraph_command_of_the_cli_page_runs(scratch, cli):
    ran = 0
    # the import line of the page needs a model: the ONNX page's worked example makes one
    subprocess.run([sys.executable, "-c", onnx_export_example()], cwd=scratch, check=True)
    for line in sh_lines((SOURCE / "docs" / "cli.md").read_text()):
        if not line.startswith("$A"):
            continue
        command = without_comment_and_options(line)
        r = run(command, scratch, cli)
        assert r.returncode == 0, f"{command}\n{r.stderr}"
        ran += 1
    assert ran >= 20
    for written in ["seed-trace/manifest.json", "seed-text", "grad-trace/grad", "causal.json", "gqa-weights",
                    "decode.json", "seed.dot", "head1_A.svg", "report.html", "walk.md", "model.json",
                    "causal.onnx"]:
        assert (scratch / written).exists(), written


def onnx_export_example():
    for line in sh_lines((SOURCE / "docs" / "onnx.md").read_text()):
        if line.startswith("python3 - <<'PY'"):
            return "\n".join(line.splitlines()[1:-1])
    raise AssertionError("docs/onnx.md has no python3 heredoc example")


def test_the_worked_example_of_the_onnx_page_runs(scratch, cli):
    lines = sh_lines((SOURCE / "docs" / "onnx.md").read_text())
    start = next(i for i, line in enumerate(lines) if line.startswith("python3 - <<'PY'"))
    subprocess.run([sys.executable, "-c", onnx_export_example()], cwd=scratch, check=True)
    for line in lines[start + 1:]:
        command = without_comment_and_options(line)
        r = run(command, scratch, cli)
        assert r.returncode == 0, f"{command}\n{r.stderr}"
    assert (scratch / "t" / "manifest.json").exists()
    assert (scratch / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert (scratch / "model.json").exists() and any((scratch / "weights").iterdir())
    # and the synopsis lines before it, on that model
    for line in lines[:start]:
        if line.startswith("attngraph "):
            command = without_comment_and_options(line.replace("MODEL.onnx", "model.onnx")
                                                  .replace("GRAPH.json", "model2.json"))
            r = run(command, scratch, cli)
            assert r.returncode == 0, f"{command}\n{r.stderr}"


def test_every_attngraph_command_of_the_readme_runs(scratch, cli):
    ran = 0
    for line in sh_lines((SOURCE / "README.md").read_text()):
        if not line.startswith("$A"):
            continue
        command = without_comment_and_options(line)
        r = run(command, scratch, cli)
        assert r.returncode == 0, f"{command}\n{r.stderr}"
        ran += 1
    assert ran >= 3
    assert (scratch / "t" / "manifest.json").exists()
    assert (scratch / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_the_patching_commands_of_the_python_page(scratch, cli):
    """They run, and the diff says what its comment says: exit 1, and which values differ."""
    lines = [line for line in sh_lines((SOURCE / "docs" / "python.md").read_text())
             if line.startswith(("attngraph ", "python3 "))]
    assert len(lines) >= 5
    for line in lines:
        command = without_comment_and_options(line)
        if command.startswith("python3 "):
            command = shlex.quote(sys.executable) + command[len("python3"):]
        r = run(command, scratch, cli)
        if command.startswith("attngraph diff"):
            assert r.returncode == 1 and "first divergence at 'head2.A'" in r.stderr, r.stderr
            status = {row.split()[0]: row.split()[1] for row in r.stdout.splitlines()[1:]}
            differ = {name for name, s in status.items() if s != "ok"}
            assert differ == {"head2.A", "head2.O", "O_concat", "Y"}, r.stdout
            assert status["head2.S"] == "ok" and status["head1.A"] == "ok" and status["head1.O"] == "ok"
        else:
            assert r.returncode == 0, f"{command}\n{r.stderr}"
    assert (scratch / "patched" / "manifest.json").exists()
