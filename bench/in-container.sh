#!/usr/bin/env bash
# Runs `carillon ARGS…` in the image BENCH_IMAGE instead of the binary, for the
# bench's --carillon: the node's CARILLON_* settings passed in, the host's network (the bench's
# database and executor are the host's), its data directory mounted, a read-only root, uid
# 10001 as the image has it. Signals reach the node (docker run proxies them); a container
# whose client was killed (the bench's kill -9) is removed once the client is gone.
#
#   BENCH_IMAGE=carillon:x carillon-bench --carillon bench/in-container.sh throughput --jobs 1000
set -euo pipefail
image=${BENCH_IMAGE:?name the image in BENCH_IMAGE}
name=carillon-bench-$$-$RANDOM
args=(run --rm --name "$name" --network host --read-only)
if [ -n "${CARILLON_DATA_DIR:-}" ]; then
    chown 10001:10001 "$CARILLON_DATA_DIR"
    args+=(-v "$CARILLON_DATA_DIR:$CARILLON_DATA_DIR")
fi
while IFS= read -r name; do
    args+=(-e "$name")
done < <(compgen -e | grep '^CARILLON_')
# This process becomes the docker client (exec keeps its pid): watch it.
client=$$
( while kill -0 "$client" 2>/dev/null; do sleep 1; done
  docker rm -f "$name" >/dev/null 2>&1 ) </dev/null >/dev/null 2>&1 &
exec docker "${args[@]}" "$image" "$@"
