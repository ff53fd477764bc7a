#!/usr/bin/env bash
# Formats ember's C++ and CUDA sources with clang-format and the repository's
# .clang-format: `scripts/format.sh` rewrites them in place; `--check` changes
# nothing and fails, listing the files, when any is not formatted (CI runs
# it). Needs clang-format (Debian's clang-format package, version 14 or newer).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format.sh: clang-format not found (apt-get install clang-format)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')
if [[ "${1:-}" == "--check" ]]; then
  # One clang-format for every file; it reports each line that would change
  # as "path:line:col: error: code should be clang-formatted".
  mapfile -t unformatted < <(clang-format --dry-run "${files[@]}" 2>&1 |
    sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: \(warning\|error\): code should be clang-formatted.*/\1/p' | sort -u)
  if ((${#unformatted[@]})); then
    echo "format.sh: ${#unformatted[@]} file(s) differ from .clang-format; run scripts/format.sh:" >&2
    printf '  %s\n' "${unformatted[@]}" >&2
    exit 1
  fi
  echo "format.sh: ${#files[@]} files formatted"
else
  clang-format -i "${files[@]}"
fi
