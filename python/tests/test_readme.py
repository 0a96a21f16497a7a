"""The README's Python example runs as written (on the tiny models)."""

import contextlib
import io
import re

from conftest import ROOT


def test_readme_python_example_runs(tiny):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n### Python\n", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    code = code.replace("/tmp/kinema-tiny", str(tiny))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md (Python)", "exec"), {"__name__": "readme"})
    text = out.getvalue()
    assert "kinema.Engine(backend=\"cpu\"" in text
    assert "'posed_joints': ((60, 77, 3), 'float32')" in text
    assert "'foot_contacts': ((60, 4), 'bool')" in text
    assert "invalid argument: GenerateRequest.frames = 1: expected 2 to" in text
    assert "(1, 64, 36)" in text
