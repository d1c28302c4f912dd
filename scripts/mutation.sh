#!/usr/bin/env bash
# Mutation testing of the identity and data-safety modules (mutmut 3, pinned in scripts/mutation-constraints.txt;
# not part of CI: a full run takes hours on two cores).
#
#   scripts/mutation.sh                 every module below, one after the other
#   scripts/mutation.sh journal cell    the named modules only
#   scripts/mutation.sh --list          the modules, their files and their test selections
#
# The code mutated is harness/ as committed (HEAD, recorded in .mutation/<module>/commit); the tests are those of
# the work tree. Each module runs in a folder of its own (.mutation/<module>/, ignored by git) that holds the mutmut settings
# (setup.cfg) and mutmut's copy of the code (mutants/), so that neither the project's pyproject.toml nor its normal
# test run is touched. Each module's mutants run against a fast selection of in-process unit tests (no test that
# starts a `harness run` subprocess), in one test process at a time.
#
# A mutant that survives (or that no selected test reaches) must either be killed by a test or be listed in
# scripts/mutation-equivalent/<module>.txt (its mutmut name, " # ", why no test can tell it from the code). The script
# prints one row per module (mutants, killed, survived, equivalent, unexplained), writes the survivors it cannot
# explain to .mutation/<module>/unexplained.txt (see one with `cd .mutation/<module> && mutmut show NAME`), and
# exits 1 when one remains, 2 on bad input.
#
# Install: .venv/bin/pip install -c scripts/mutation-constraints.txt mutmut
# MUTATION_RERUN=1 runs again only the mutants the last run of each module left unexplained (after a test was added
# for them), keeping the other results of that run (same commit, same mutants).
# Environment: MUTATION_CHILDREN (default 1) mutants run at once; MUTATION_WORK (default .mutation) the work folder.
set -euo pipefail
{  # the whole script is read before any of it runs: an edit of this file during a run cannot change the run

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
MUTMUT="$(dirname "$PY")/mutmut"
WORK="${MUTATION_WORK:-$ROOT/.mutation}"
CHILDREN="${MUTATION_CHILDREN:-1}"
EQUIVALENT="$ROOT/scripts/mutation-equivalent"

# module | file mutated | mutant names (globs; "*" = all of the file) | tests run against its mutants
MODULES=(
  "journal|harness/worlds/journal.py|*|tests/test_mutation_journal.py"
  "record-coverage|harness/core/record.py|harness.core.record.x_coverage_tags__mutmut_* harness.core.record.x_covered_languages__mutmut_* harness.core.record.x_missing_languages__mutmut_* harness.core.record.x*finished_cell_run__mutmut_* harness.core.record.x_one_per_step__mutmut_*|tests/test_mutation_record.py tests/test_mutation_record_store.py"
  "declarations|harness/core/declarations.py|*|tests/test_declarations_exact.py tests/test_mutation_declarations.py tests/test_code_identity.py::test_code_digest_follows_the_package_imports"
  "store_open|harness/core/store_open.py|*|tests/test_mutation_store_open.py"
  "cache_admin|harness/cache_admin.py|*|tests/test_mutation_cache_admin.py tests/test_mutation_cache_admin_prune.py tests/test_prune_safety.py tests/test_cache_admin.py::test_du_sizes_each_kind_per_world tests/test_cache_admin.py::test_prune_never_removes_results_or_builds_in_progress tests/test_cache_admin.py::test_prune_finished_takes_only_the_products_of_finished_cells tests/test_cache_admin.py::test_cell_products_are_the_cells_complete_init_and_cpt_products --deselect tests/test_prune_safety.py::test_a_lock_removed_with_its_product_is_never_held_twice"
  "cache|harness/core/cache.py|*|tests/test_mutation_cache.py tests/test_mutation_cache_safety.py tests/test_prune_safety.py::test_a_tracking_store_under_any_name_survives_prune tests/test_prune_safety.py::test_a_build_older_than_an_hour_survives_a_runs_start_and_prune tests/test_prune_safety.py::test_files_of_a_method_cache_being_read_or_written_survive_prune"
  "cell|harness/cell.py|*|tests/test_mutation_cell.py tests/test_mutation_cell_run.py"
  "spec-identity|harness/spec.py|harness.spec.x_cell_identity__mutmut_* harness.spec.x_init_inputs__mutmut_* harness.spec.x_product_keys__mutmut_* harness.spec.x_identity_numerics__mutmut_*|tests/test_mutation_spec.py"
  "adding|harness/worlds/adding.py|*|tests/test_mutation_adding.py"
  "record|harness/core/record.py|*|tests/test_mutation_record.py tests/test_mutation_record_store.py"
)

die() { echo "mutation.sh: $*" >&2; exit 2; }

module_line() {
  local m
  for m in "${MODULES[@]}"; do
    [[ "${m%%|*}" == "$1" ]] && { echo "$m"; return 0; }
  done
  return 1
}

if [[ "${1:-}" == "--list" ]]; then
  for m in "${MODULES[@]}"; do IFS='|' read -r name file globs tests <<<"$m"; echo "$name: $file [$globs] <- $tests"; done
  exit 0
fi
[[ -x "$MUTMUT" ]] || die "mutmut is not installed beside $PY: $PY -m pip install -c scripts/mutation-constraints.txt mutmut"
[[ "$CHILDREN" =~ ^[1-9][0-9]*$ ]] || die "MUTATION_CHILDREN must be a positive whole number, not '$CHILDREN'"
[[ -d "$EQUIVALENT" ]] || die "missing $EQUIVALENT/"
NAMES=("$@")
if [[ ${#NAMES[@]} -eq 0 ]]; then
  for m in "${MODULES[@]}"; do NAMES+=("${m%%|*}"); done
fi
for name in "${NAMES[@]}"; do
  module_line "$name" >/dev/null || die "unknown module '$name' (scripts/mutation.sh --list names them)"
done

# setup.cfg for one module: mutmut reads its settings there when pyproject.toml has no [tool.mutmut] table
write_config() {  # folder file tests...
  local dir="$1" file="$2"; shift 2
  {
    echo "[mutmut]"
    echo "source_paths = harness"
    echo "only_mutate = $file"
    echo "use_git_change_detection = false"
    echo "pytest_add_cli_args ="
    printf '    %s\n' -n 0 -p no:cacheprovider -p no:randomly
    echo "pytest_add_cli_args_test_selection ="
    printf '    %s\n' "$@"
  } >"$dir/setup.cfg"
}

run_module() {  # name file globs tests
  local name="$1" file="$2" globs="$3" tests="$4" dir="$WORK/$1"
  local -a selectors=()
  if [[ "${MUTATION_RERUN:-}" == 1 && -s "$dir/unexplained.txt" && -d "$dir/mutants" ]]; then
    mapfile -t selectors <"$dir/unexplained.txt"
    # shellcheck disable=SC2086
    write_config "$dir" "$file" $tests
    echo "== $name: the ${#selectors[@]} unexplained mutants of the last run again, against $tests" >&2
    (cd "$dir" && OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "$MUTMUT" run --max-children "$CHILDREN" "${selectors[@]}" \
       >"$dir/run.log" 2>&1) || { tail -n 30 "$dir/run.log" >&2; echo "mutmut failed on $name" >&2; return 3; }
    return 0
  fi
  [[ "${MUTATION_RERUN:-}" == 1 && -d "$dir/mutants" ]] && { echo "== $name: nothing unexplained to run again" >&2; return 0; }
  rm -rf "$dir/mutants" "$dir/harness"
  mkdir -p "$dir"
  # the product code as committed (HEAD), so that an edit in progress in the work tree is not mutated with it
  git -C "$ROOT" archive --format=tar HEAD harness | tar -x -C "$dir"
  ln -sfn "$ROOT/tests" "$dir/tests"
  cp "$ROOT/pyproject.toml" "$dir/pyproject.toml"
  # shellcheck disable=SC2086
  write_config "$dir" "$file" $tests
  [[ "$globs" != "*" ]] && read -r -a selectors <<<"$globs"
  git -C "$ROOT" rev-parse HEAD >"$dir/commit"
  echo "== $name: $file ($globs) against $tests" >&2
  (cd "$dir" && OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "$MUTMUT" run --max-children "$CHILDREN" "${selectors[@]}" \
     >"$dir/run.log" 2>&1) || { tail -n 30 "$dir/run.log" >&2; echo "mutmut failed on $name: $dir/run.log" >&2; return 3; }
}

rc=0
for name in "${NAMES[@]}"; do
  IFS='|' read -r _ file globs tests <<<"$(module_line "$name")"
  run_module "$name" "$file" "$globs" "$tests" || rc=3
done

"$PY" "$ROOT/scripts/mutation_table.py" "$WORK" "$EQUIVALENT" "${NAMES[@]}" -- "${MODULES[@]}" || rc=$((rc > 0 ? rc : 1))
exit "$rc"
}
