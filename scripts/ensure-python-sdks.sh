#!/bin/sh
# Makes sure the Python venv of the Python SDK tests (test/e2e/python-sdk.test.ts) holds the official
# `openai` and `anthropic` packages of test/python/requirements.txt (run by npm's `pretest`, after
# scripts/ensure-test-deps.sh, which installs python3-venv).
#
#   venv          .test-venv (QUOTARING_PYTHON_VENV overrides), not committed
#   packages      from pip's configured index: `pip config list` names a local mirror where there is one
#
# Fast when everything is there (the venv's copy of the requirements equal to the file, and one
# Python start finding both packages installed). Otherwise it (re)creates the venv and installs the requirements;
# when it cannot (no python3, no venv module, pip failing) it stops with the reason and exit 1:
# the Python SDK tests need it, they are never skipped.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
venv=${QUOTARING_PYTHON_VENV:-$root/.test-venv}
requirements=$root/test/python/requirements.txt
python=$venv/bin/python
stamp=$venv/quotaring-requirements.txt

# Installed, by their metadata (importing the SDKs takes seconds).
installed="import importlib.metadata as m; m.version('openai'); m.version('anthropic')"
if [ -x "$python" ] && cmp -s "$requirements" "$stamp" && "$python" -c "$installed" >/dev/null 2>&1; then
  exit 0
fi

fail() {
  echo "npm test: the Python SDKs could not be installed into $venv ($1)." >&2
  echo "The Python SDK tests need them; fix the above, then run npm test again." >&2
  exit 1
}

command -v python3 >/dev/null 2>&1 || fail "no python3 here; Debian: apt-get install python3-venv"
echo "npm test: installing the Python SDKs ($(grep -v '^#' "$requirements" | tr '\n' ' ')) into $venv" >&2
# --clear empties a venv left half made.
python3 -m venv --clear "$venv" >&2 || fail "python3 -m venv failed; Debian: apt-get install python3-venv"
# One retry per index: an index this machine cannot reach (pip's default where a mirror is configured) is given up fast.
"$python" -m pip install --quiet --disable-pip-version-check --retries 1 -r "$requirements" >&2 || fail "pip install failed, see above"
"$python" -c 'import openai, anthropic' || fail "the installed SDKs do not import"
cp "$requirements" "$stamp"
