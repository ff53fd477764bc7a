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
  unformatted=()
  for f in "${files[@]}"; do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || unformatted+=("$f")
  done
  if ((${#unformatted[@]})); then
    echo "format.sh: ${#unformatted[@]} file(s) differ from .clang-format; run scripts/format.sh:" >&2
    printf '  %s\n' "${unformatted[@]}" >&2
    exit 1
  fi
  echo "format.sh: ${#files[@]} files formatted"
else
  clang-format -i "${files[@]}"
fi
