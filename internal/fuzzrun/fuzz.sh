#!/bin/sh
# fuzz.sh GO FUZZTIME pkg:Target... — run each fuzz target for FUZZTIME.
#
# go test's fuzz coordinator has a race at the end of -fuzztime (Go's
# internal/fuzz compares the parent context's error with its child's while
# the cancel is half done): now and then a target that found nothing fails
# with a bare "context deadline exceeded". Such a run, and only such a run
# (that line, and no failing input written), is tried once more; a real
# failure fails at once.
set -u
go=$1 fuzztime=$2
shift 2
for t in "$@"; do
	pkg=${t%%:*} name=${t##*:}
	echo "fuzz $pkg $name"
	try=1
	while :; do
		out=$("$go" test -run='^$' -fuzz="^$name\$" -fuzztime="$fuzztime" -fuzzminimizetime=5s "$pkg" 2>&1)
		rc=$?
		printf '%s\n' "$out"
		[ "$rc" -eq 0 ] && break
		if [ "$try" -ge 2 ] ||
			printf '%s\n' "$out" | grep -q 'Failing input written' ||
			! printf '%s\n' "$out" | grep -qx '    context deadline exceeded'; then
			exit 1
		fi
		echo "fuzz $pkg $name: stopped by go test's end-of-fuzztime race (context deadline exceeded, no failing input); once more"
		try=$((try + 1))
	done
done
