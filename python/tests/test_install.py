"""`cmake --install` puts the Python package where Python imports it (issue 15, part 1): into
<prefix>/lib/python3.X/dist-packages (site-packages elsewhere) under the install prefix, so the
default prefix /usr/local lands in the system Python's own path, and `--prefix DIR` keeps
everything under DIR. The installed copy is imported from a clean folder and runs the seed
graph (reference: the seed document's values)."""
import json
import os
import pathlib
import subprocess
import sys


def test_cmake_install_puts_an_importable_package_under_the_prefix(tmp_path, seed_path, seed_values):
    build = os.environ.get("ATTNGRAPH_BUILD_DIR")
    assert build, "ATTNGRAPH_BUILD_DIR must name the build tree (ctest sets it)"
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", build, "--prefix", str(prefix)], check=True, capture_output=True)
    installed = [pathlib.Path(p) for p in (pathlib.Path(build) / "install_manifest.txt").read_text().split("\n") if p]
    outside = [p for p in installed if not p.is_relative_to(prefix)]
    assert not outside, "installed outside the prefix: %s" % outside
    init = [p for p in installed if p.name == "__init__.py" and p.parent.name == "attngraph"]
    core = [p for p in installed if p.name.startswith("_core.") and p.suffix == ".so"]
    assert len(init) == 1 and len(core) == 1 and core[0].parent == init[0].parent
    site = init[0].parent.parent
    rel = site.relative_to(prefix)
    assert rel.parts[0] == "lib" and rel.parts[1] == "python%d.%d" % sys.version_info[:2]
    assert rel.parts[2] in ("dist-packages", "site-packages")

    # with the configured prefix (/usr/local unless changed), the folder is on Python's own path
    cache = (pathlib.Path(build) / "CMakeCache.txt").read_text()
    configured = [l.split("=", 1)[1] for l in cache.splitlines() if l.startswith("CMAKE_INSTALL_PREFIX:")][0]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    path = json.loads(subprocess.run([sys.executable, "-c", "import sys, json; print(json.dumps(sys.path))"],
                                     env=env, cwd=tmp_path, check=True, capture_output=True, text=True).stdout)
    assert str(pathlib.Path(configured) / rel) in path, (configured, rel, path)

    # the installed copy imports from anywhere and computes the seed document's Y
    env["PYTHONPATH"] = str(site)
    script = ("import attngraph, json, sys; g = attngraph.load(sys.argv[1]); "
              "print(json.dumps({'file': attngraph.__file__, 'Y': g.run()['Y'].tolist()}))")
    out = json.loads(subprocess.run([sys.executable, "-c", script, str(seed_path)], env=env, cwd=tmp_path,
                                    check=True, capture_output=True, text=True).stdout)
    assert pathlib.Path(out["file"]) == init[0]
    for got, want in zip(out["Y"], seed_values["Y"]):
        assert max(abs(a - b) for a, b in zip(got, want)) < 1e-5
