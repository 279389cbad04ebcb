#!/bin/sh
# Print the path of a working Python 3.13 interpreter (with venv + ensurepip), or nothing.
# Order: $PYTHON313, python3.13 on PATH, pyenv (current selection, then each installed 3.13.x),
# common pyenv/system locations. Pyenv shims are verified by running them, since a shim exists
# even when no 3.13 is selected.
ok() {
    [ -n "$1" ] && [ -x "$1" ] &&
        "$1" -c 'import sys, venv, ensurepip; sys.exit(0 if sys.version_info[:2] == (3, 13) else 1)' \
            >/dev/null 2>&1
}
try() {
    for c in "$@"; do
        if ok "$c"; then
            # Resolve a shim to the real interpreter so the venv does not depend on pyenv state.
            "$c" -c 'import sys; print(sys.executable)'
            exit 0
        fi
    done
}

try "${PYTHON313:-}"
try "$(command -v python3.13 2>/dev/null)"
if command -v pyenv >/dev/null 2>&1; then
    try "$(pyenv which python3.13 2>/dev/null)"
    for v in $(pyenv versions --bare 2>/dev/null | grep '^3\.13' | sort -r); do
        try "$(PYENV_VERSION=$v pyenv which python3.13 2>/dev/null)"
    done
fi
for root in "${PYENV_ROOT:-}" "$HOME/.pyenv" /root/.pyenv /usr/local/pyenv /opt/pyenv; do
    [ -n "$root" ] || continue
    for c in "$root"/versions/3.13*/bin/python3.13; do
        try "$c"
    done
done
try /usr/local/bin/python3.13 /usr/bin/python3.13 /opt/python3.13/bin/python3.13
exit 0
