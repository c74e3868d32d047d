#!/usr/bin/env bash
# The Debian packages (make deb: cpack in a build directory) install on
# this machine, run a broker on the packaged config's embedded store as the
# packaged user and a worker from /usr/bin, and purge without a trace but
# the system user. lintian finds nothing but what deploy/debian/lintian-
# overrides explains. As root (dpkg).
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "skipped: dpkg needs root"; exit 77; }
WORK=$(mktemp -d /tmp/dueq-deb-XXXXXX)
# shellcheck source=scripts/processes.sh
. "$SRC/scripts/processes.sh"
purge() { dpkg --purge dueq libdueq-dev libdueq0.1 >/dev/null 2>&1 || true; }
trap 'stop_started; purge; rm -rf "$WORK"' EXIT

(cd "$BUILD" && cpack -B "$WORK/packages" >"$WORK/cpack.log")
ls "$WORK"/packages/*.deb
for package in dueq libdueq0.1 libdueq-dev; do
  [ -e "$(ls "$WORK"/packages/${package}_*.deb)" ] || { echo "no package $package"; exit 1; }
done

echo "== lintian"
lintian --no-tag-display-limit --suppress-tags-from-file "$SRC/deploy/debian/lintian-overrides" \
  "$WORK"/packages/*.deb >"$WORK/lintian.txt" 2>&1 || true
if grep -E '^[EW]: ' "$WORK/lintian.txt"; then echo "lintian: findings not explained in deploy/debian/lintian-overrides"; exit 1; fi

echo "== dpkg -i"
purge
dpkg -i "$WORK"/packages/*.deb >"$WORK/dpkg.log"
for f in /usr/bin/dueq-broker /usr/bin/dueq-worker /usr/bin/dueq /etc/dueq/broker.toml /lib/systemd/system/dueq-broker.service \
         /lib/systemd/system/dueq-worker@.service /usr/include/dueq/client.hpp; do
  [ -e "$f" ] || { echo "not installed: $f"; exit 1; }
done
grep -q '^ExecStart=/usr/bin/dueq-broker ' /lib/systemd/system/dueq-broker.service
getent passwd dueq >/dev/null || { echo "no user dueq"; exit 1; }
[ "$(stat -c %U /var/lib/dueq)" = dueq ]
pkg-config --exists dueq || { echo "pkg-config does not find dueq"; exit 1; }

echo "== a broker and a worker from the installed paths"
# The packaged config, on a free port (another test may hold 7600).
start_broker /usr/bin/dueq "$WORK/broker.log" runuser -u dueq -- /usr/bin/dueq-broker --config /etc/dueq/broker.toml
ENDPOINT=$BROKER_ENDPOINT
/usr/bin/dueq-worker --broker "$ENDPOINT" --queue packaged --exec 'hi=cat > "$DUEQ_RESULT_FILE"' >"$WORK/worker.log" 2>&1 &
PIDS+=($!)
/usr/bin/dueq --broker "$ENDPOINT" enqueue --queue packaged --type hi --id deb-1 --payload 'from the package' >/dev/null
got=$(/usr/bin/dueq --broker "$ENDPOINT" wait deb-1 --queue packaged --for 30s)
[ "$got" = "from the package" ] || { echo "the job's result is '$got'"; cat "$WORK/broker.log" "$WORK/worker.log"; exit 1; }
ls /var/lib/dueq | grep -q . || { echo "the embedded store wrote nothing to /var/lib/dueq"; exit 1; }
stop_started

echo "== dpkg --purge"
purge
for f in /usr/bin/dueq-broker /etc/dueq /var/lib/dueq /lib/systemd/system/dueq-broker.service /usr/include/dueq; do
  [ ! -e "$f" ] || { echo "left after purge: $f"; exit 1; }
done
echo "the packages install, run a job from /usr/bin, and purge"
