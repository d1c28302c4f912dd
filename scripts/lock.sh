#!/usr/bin/env bash
# Regenerate constraints.txt, the lock both README commands install from:
#   bash scripts/lock.sh
# It resolves the project with every extra that CI and the main job use (test, ray) in a throw-away venv, torch
# first (the CPU build, as the README installs it), and writes the exact versions of the whole dependency set.
# Review the diff and run the test suite before committing a new lock.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d)/venv
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet torch==2.13.0
"$venv/bin/pip" install --quiet -e '.[test,ray]'
{
  echo "# The lock of the whole dependency set (Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())'), CPU torch)."
  echo "# Install with: pip install -c constraints.txt torch==2.13.0 && pip install -c constraints.txt -e '.[test]'"
  echo "# Regenerate with: bash scripts/lock.sh"
  # a local version label (+cpu) is dropped so that a CUDA build of the same torch version satisfies the lock
  "$venv/bin/pip" freeze --exclude-editable --all | grep -v -E '^(pip|setuptools|wheel)==' | sed -E 's/\+[A-Za-z0-9.]+$//'
} > constraints.txt
rm -rf "$(dirname "$venv")"
echo "wrote constraints.txt ($(grep -c '==' constraints.txt) pins)"
