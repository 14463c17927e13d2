#!/usr/bin/env bash
# Builds the container image (Containerfile) and checks it end to end, on a machine that
# reaches no container registry: see docs/deploy.md ("Testing the image").
#
#  1. debootstrap a Debian bookworm root with Debian's python3 and python3-venv and import
#     it as the base image (cached: later runs skip it);
#  2. `make image` on that base (podman, vfs storage, chroot isolation);
#  3. train a small hybrid project inside the image (non-root, a few hundred records of
#     the shared data);
#  4. serve it from a read-only /projects mount with the feedback store on a writable one;
#  5. pass only when the HEALTHCHECK answers, Annif's own client (annif-client) lists the
#     project and gets suggestions through /v1, and /metrics answers Prometheus text.
#
# Not part of `make test`: the first run takes many minutes (debootstrap, a 2 GB image on
# vfs). Run it as root from the repository root, after `make test` or `make .venv/.installed`
# made .venv (its annif-client and prometheus-client check the server):
#     scripts/test-image.sh
# Settings (environment):
#     TAGALIGN_IMAGE_CACHE  cache folder (default /var/tmp/tagalign-image)
#     TAGALIGN_IMAGE        image name to build (default localhost/tagalign:test)
#     TAGALIGN_SHARED_DATA  the shared data folder (default ../shared/data)
#     TORCH_WHEEL           a local CPU torch wheel to build with, for machines that do not
#                           reach the CPU-only torch index (default: a torch-2.13.0+cpu
#                           cp311 wheel in PIP_FIND_LINKS, else the index)
#     PIP_CERT              a CA bundle for the build's pip (default: pip's own setting here)
#     DEBIAN_MIRROR         debootstrap's mirror (default: debootstrap's own)
#     TEST_PYTHON           the Python with annif-client (default .venv/bin/python)
#     SERVE_WORKERS         serve with --workers N (default 1: one process; 2 checks the
#                           preloaded workers inside the container's limits)
#     KEEP=1                leave the container running after the checks
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CACHE=${TAGALIGN_IMAGE_CACHE:-/var/tmp/tagalign-image}
IMAGE=${TAGALIGN_IMAGE:-localhost/tagalign:test}
BASE_IMAGE=localhost/tagalign-base:bookworm
DATA=${TAGALIGN_SHARED_DATA:-$ROOT/../shared/data}
PY=${TEST_PYTHON:-$ROOT/.venv/bin/python}
NAME=tagalign-image-test-$$
RECORDS=600
# the storage driver and runtime measured to work on machines without overlay mounts or
# user namespaces; the low ulimits keep runc within the sandbox's limits
PODMAN=(podman --storage-driver vfs)
RUN=("${PODMAN[@]}" --runtime runc run --network host
     --ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

step() { printf '\n== %s  [%ss]\n' "$*" "$SECONDS"; }
die() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (debootstrap, podman's vfs storage)"
for tool in podman debootstrap make; do
    command -v "$tool" >/dev/null || die "$tool not found (apt-get install podman buildah runc debootstrap)"
done
[ -f "$DATA/llms4subjects/train.jsonl.gz" ] || die "no shared data at $DATA (TAGALIGN_SHARED_DATA)"
"$PY" -c 'import annif_client, prometheus_client' 2>/dev/null \
    || die "$PY lacks annif-client or prometheus-client: make .venv/.installed (or TEST_PYTHON=…)"
mkdir -p "$CACHE"

step "base image $BASE_IMAGE"
if "${PODMAN[@]}" image exists "$BASE_IMAGE"; then
    echo "cached"
else
    ROOTFS=$CACHE/bookworm-root
    if [ ! -f "$ROOTFS/.complete" ]; then
        rm -rf "$ROOTFS"
        # Debian's own python3 (3.11 in bookworm), its venv module and the CA bundle for
        # pip's downloads; minbase brings apt and passwd (useradd) already
        nice -n 10 debootstrap --variant=minbase \
            --include=python3,python3-venv,ca-certificates \
            bookworm "$ROOTFS" ${DEBIAN_MIRROR:+"$DEBIAN_MIRROR"}
        rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
        touch "$ROOTFS/.complete"
    fi
    tar -C "$ROOTFS" --exclude=./.complete -c . | "${PODMAN[@]}" import - "$BASE_IMAGE"
fi

step "image $IMAGE"
# No CPU torch index here? Build with a local CPU wheel: its folder is mounted into the
# build (podman build --volume), so the wheel never enters the build context or a layer.
if [ -z "${TORCH_WHEEL:-}" ]; then
    for dir in ${PIP_FIND_LINKS:-}; do
        for whl in "$dir"/torch-2.13.0+cpu-cp311-cp311-manylinux*_x86_64.whl; do
            [ -f "$whl" ] && TORCH_WHEEL=$whl && break 2
        done
    done
fi
ARGS="--build-arg BASE=$BASE_IMAGE"
if [ -n "${TORCH_WHEEL:-}" ]; then
    echo "torch from $TORCH_WHEEL"
    ARGS+=" --volume $(dirname "$TORCH_WHEEL"):/wheels:ro"
    ARGS+=" --build-arg TORCH=/wheels/$(basename "$TORCH_WHEEL") --build-arg TORCH_INDEX="
fi
# pip's CA bundle on this machine (a TLS-inspecting proxy's CA may be in it), for the
# build's pip too: pip inside the image knows only its own certifi bundle
CA=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
if [ -n "$CA" ] && [ -f "$CA" ]; then
    echo "pip's CA bundle: $CA"
    ARGS+=" --volume $(dirname "$CA"):/pip-ca:ro --build-arg PIP_CA=/pip-ca/$(basename "$CA")"
fi
t0=$SECONDS
nice -n 10 make --no-print-directory image IMAGE="$IMAGE" IMAGE_ARGS="$ARGS"
echo "built in $((SECONDS - t0)) s"
"${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE" \
    | awk '{printf "%s: %.0f bytes (%.2f GB)\n", "'"$IMAGE"'", $1, $1 / 1e9}'

step "train a small project inside the image"
WORK=$CACHE/run
rm -rf "$WORK"
mkdir -p "$WORK/projects" "$WORK/state"
cp "$DATA/gnd/gnd-subjects.tsv.gz" "$WORK/projects/"
"$PY" - "$DATA/llms4subjects" "$WORK" "$RECORDS" <<'EOF'
import gzip, itertools, json, sys
src, work, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with gzip.open(f"{src}/train.jsonl.gz", "rt") as f, gzip.open(f"{work}/train.jsonl.gz", "wt") as out:
    out.writelines(itertools.islice(f, n))
with gzip.open(f"{src}/dev.jsonl.gz", "rt") as f:  # the text the client sends
    rec = next(r for r in map(json.loads, f) if r.get("abstract") and r["lang"] == "de")
open(f"{work}/sample.txt", "w").write(f"{rec['title']}\n{rec['abstract']}\n")
EOF
# feedback in the writable state volume, so /projects can be mounted read-only
cat > "$WORK/projects/projects.toml" <<'EOF'
[small]
name = "Small hybrid (image test)"
recipe = "hybrid"
vocab = "gnd-subjects.tsv.gz"
params = { sources = ["omikuji", "tfidf_knn", "lexical"], ranker_rounds = 60, holdout_fraction = 0.2 }
feedback_db = "/var/lib/tagalign/feedback.sqlite"
EOF
chown -R 10001:10001 "$WORK/projects" "$WORK/state"
t0=$SECONDS
nice -n 10 "${RUN[@]}" --rm --no-healthcheck -v "$WORK/projects:/projects" -v "$WORK/state:/var/lib/tagalign" \
    -v "$WORK/train.jsonl.gz:/data/train.jsonl.gz:ro" --entrypoint tagalign "$IMAGE" \
    train --projects /projects/projects.toml small --train /data/train.jsonl.gz --threads 2
echo "trained in $((SECONDS - t0)) s"

step "serve it"
PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cleanup() {
    if [ "${KEEP:-0}" = 1 ]; then
        echo "container $NAME left running on port $PORT"
    else
        "${PODMAN[@]}" rm -f "$NAME" >/dev/null 2>&1 || true
    fi
}
trap cleanup EXIT
t0=$SECONDS
# host networking: the server binds the loopback only, on a free port (the image's CMD
# says 0.0.0.0:8000); TAGALIGN_HEALTH_URL moves the HEALTHCHECK along. Its timer needs
# systemd, which a sandbox lacks (podman logs "unable to get systemd connection"): the
# check is run once by hand below instead.
"${RUN[@]}" -d --name "$NAME" -v "$WORK/projects:/projects:ro" -v "$WORK/state:/var/lib/tagalign" \
    -e TAGALIGN_HEALTH_URL="http://127.0.0.1:$PORT/tagalign/v1/health/ready" "$IMAGE" \
    --projects /projects/projects.toml --host 127.0.0.1 --port "$PORT" \
    --workers "${SERVE_WORKERS:-1}" >/dev/null
BASE_URL=http://127.0.0.1:$PORT
for _ in $(seq 300); do
    if [ "$("${PODMAN[@]}" inspect --format '{{.State.Running}}' "$NAME")" != true ]; then
        "${PODMAN[@]}" logs "$NAME" >&2 || true
        die "the container stopped"
    fi
    "$PY" -c "import urllib.request as u; u.urlopen('$BASE_URL/tagalign/v1/health', timeout=2)" \
        2>/dev/null && break
    sleep 1
done
"${PODMAN[@]}" logs "$NAME"
"$PY" -c "import urllib.request as u; print(u.urlopen('$BASE_URL/tagalign/v1/health').read().decode())" \
    || die "no answer on $BASE_URL/tagalign/v1/health/ready"
echo "ready after $((SECONDS - t0)) s"

step "HEALTHCHECK"
"${PODMAN[@]}" healthcheck run "$NAME" || die "the image's HEALTHCHECK failed"
echo "healthy"

step "annif-client: list and suggest through /v1"
"$PY" - "$BASE_URL/v1/" "$WORK/sample.txt" <<'EOF'
import sys
from annif_client import AnnifClient

client = AnnifClient(api_base=sys.argv[1])
projects = {p["project_id"]: p for p in client.projects}
print("projects:", {k: (v["name"], v["is_trained"]) for k, v in projects.items()})
assert projects["small"]["is_trained"] is True, projects
text = open(sys.argv[2]).read()
results = client.suggest("small", text, limit=5)
print("suggest:", text.splitlines()[0][:70])
for r in results:
    print(f"  {r['score']:.3f}  {r['uri']}  {r['label']}")
assert 1 <= len(results) <= 5, results
assert all(r["uri"].startswith("https://d-nb.info/gnd/") and 0 < r["score"] <= 1 for r in results)
EOF

step "/metrics"
"$PY" - "$BASE_URL/metrics" <<'EOF'
import sys
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

try:
    with urllib.request.urlopen(sys.argv[1], timeout=10) as resp:
        ctype, body = resp.headers.get("Content-Type", ""), resp.read().decode()
except urllib.error.HTTPError as exc:
    sys.exit(f"FAILED: {sys.argv[1]} answered {exc.code}: this build serves no /metrics")
families = list(text_string_to_metric_families(body))
ours = sorted(f.name for f in families if f.name.startswith("tagalign_"))
print(f"{ctype}; {len(families)} metric families, tagalign's: {', '.join(ours)}")
assert ctype.startswith("text/plain"), ctype
# the requests above were counted: some tagalign_ sample is above zero
assert any(s.value > 0 for f in families if f.name.startswith("tagalign_") for s in f.samples), \
    body[:500]
EOF

printf '\nPASSED: scripts/test-image.sh in %s s\n' "$SECONDS"
