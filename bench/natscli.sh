#!/bin/sh
# natscli.sh measures raw JetStream the way an operator would check it: the
# nats CLI's `nats bench js pub sync` (64 clients, 300-byte messages, each on
# a subject of its own) against a nats-server of this module's version in a
# process of its own, with sync_interval always and then 2m. make bench's
# raw line (BenchmarkConditionalAppend) is measured in one process with the
# server embedded, and conditional; set the two side by side before taking
# loopgate's ratio against either (docs/benchmarks.md, "Raw, measured two
# ways"). Needs the Go module proxy (it builds both tools).
#
#   sh bench/natscli.sh            # or: make bench-natscli
#   MSGS=60000 PORT=14333 sh bench/natscli.sh
set -eu

GO=${GO:-go}
MSGS=${MSGS:-30000}
CLIENTS=${CLIENTS:-64}
PORT=${PORT:-14333}
NATSCLI=${NATSCLI:-v0.5.0}

work=$(mktemp -d)
pid=
cleanup() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

"$GO" build -o "$work/nats-server" github.com/nats-io/nats-server/v2
GOBIN="$work" "$GO" install "github.com/nats-io/natscli/nats@$NATSCLI"

for sync in always 2m; do
	store="$work/store-$sync"
	mkdir -p "$store"
	printf 'listen: 127.0.0.1:%s\njetstream { store_dir: "%s", sync_interval: %s }\n' "$PORT" "$store" "$sync" >"$work/$sync.conf"
	"$work/nats-server" -c "$work/$sync.conf" >"$work/$sync.log" 2>&1 &
	pid=$!
	tries=0
	until grep -q "Server is ready" "$work/$sync.log"; do
		tries=$((tries + 1))
		if [ "$tries" -gt 100 ]; then
			cat "$work/$sync.log" >&2
			echo "natscli.sh: nats-server did not start" >&2
			exit 1
		fi
		sleep 0.1
	done
	rate=$("$work/nats" -s "nats://127.0.0.1:$PORT" bench js pub sync loopgate.raw \
		--multisubject --clients "$CLIENTS" --msgs "$MSGS" --size 300 \
		--create --storage file --no-progress 2>&1 |
		sed -n 's/.*aggregated stats: \([0-9,]*\) msgs\/sec.*/\1/p')
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
	if [ -z "$rate" ]; then
		echo "natscli.sh: nats bench printed no aggregate rate" >&2
		exit 1
	fi
	echo "sync=$sync clients=$CLIENTS size=300B msgs=$MSGS: $rate msgs/s (nats bench js pub sync, server in its own process)"
done
