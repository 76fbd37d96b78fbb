#!/usr/bin/env bash
# The suite as an unprivileged user (nobody), the way loa-finn runs: its container's `USER finn`
# has no CAP_SYS_ADMIN, no cgroup to write, and RLIMIT_NPROC applies to it. Called by .ci/run
# as root after `npm test` has built everything.
#
# nobody can neither read root's toolchain (/root is 0700) nor write the checkout, so:
#   - the cargo test binaries are built here as root (`cargo test --no-run`) and run as nobody;
#   - the repository (git-tracked files, node_modules, the built addon and supervisor) is copied to a
#     staging directory nobody owns, with its own HOME and npm cache, and vitest runs there.
# Skipped tests say why in their own output (e.g. a full tmpfs needs root to mount).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
UID_NOBODY=${FINN_CI_UID:-65534}
as_nobody() {
  setpriv --reuid="$UID_NOBODY" --regid="$UID_NOBODY" --clear-groups --inh-caps=-all \
    env -i PATH="$PATH" HOME="$STAGE/home" npm_config_cache="$STAGE/npm-cache" \
    CARGO_MANIFEST_DIR="$STAGE" PROPTEST_CASES="${PROPTEST_CASES:-500}" TMPDIR=/tmp NO_COLOR=1 \
    "$@"
}

STAGE=$(mktemp -d /tmp/finn-nobody.XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
chmod 755 "$STAGE"

# The cargo integration tests, as binaries.
bins=$(cargo test --no-run --message-format=json 2>/dev/null |
  node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.split("\n")){if(!l)continue;const m=JSON.parse(l);if(m.reason==="compiler-artifact"&&m.executable&&m.profile.test)console.log(m.executable)}})')
mkdir -p "$STAGE/bin"
for b in $bins; do cp "$b" "$STAGE/bin/"; done

# The repository as nobody will see it, with the built addon and supervisor (not tracked).
git ls-files -z | xargs -0 cp --parents -t "$STAGE"
cp -a node_modules "$STAGE/"
cp -a ./*.node ./finn-supervisor.* "$STAGE/"
mkdir -p "$STAGE/home" "$STAGE/npm-cache"
chown -R "$UID_NOBODY:$UID_NOBODY" "$STAGE"

echo "── cargo tests as uid $UID_NOBODY ──"
cd "$STAGE"
for b in "$STAGE"/bin/*; do
  echo "$(basename "$b")"
  as_nobody "$b" --quiet
done

echo "── vitest as uid $UID_NOBODY ──"
# pack.test.ts builds an npm tarball, which does not depend on privileges.
as_nobody node_modules/.bin/vitest run --exclude '__test__/pack.test.ts' --exclude '__test__/threats.test.ts'
# The threat suite alone (as in npm test): its bombs and busy loops stay off the event-loop timings.
as_nobody node_modules/.bin/vitest run '__test__/threats.test.ts'
cd "$ROOT"
