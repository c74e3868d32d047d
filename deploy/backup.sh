#!/usr/bin/env bash
# Copies a consistent snapshot of the dueq Redis to BACKUP_DIR, keeping the
# newest KEEP copies. Run from cron, e.g. hourly.
#   REDIS_CLI_ARGS="-h 127.0.0.1 -p 6379 -a secret" BACKUP_DIR=/var/backups/dueq deploy/backup.sh
set -euo pipefail
BACKUP_DIR=${BACKUP_DIR:-/var/backups/dueq}
KEEP=${KEEP:-48}
read -r -a ARGS <<<"${REDIS_CLI_ARGS:-}"
mkdir -p "$BACKUP_DIR"
target="$BACKUP_DIR/dueq-$(date -u +%Y%m%dT%H%M%SZ).rdb"
redis-cli "${ARGS[@]}" --rdb "$target.partial" >/dev/null
mv "$target.partial" "$target"
echo "backup written: $target ($(stat -c %s "$target") bytes)"
ls -1t "$BACKUP_DIR"/dueq-*.rdb | tail -n +$((KEEP + 1)) | xargs -r rm --
