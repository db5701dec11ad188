// Package natsauth proves deploy/nats-accounts.conf: its tests start a
// real nats-server from that file (embedded through natsd, on a TCP
// listener), connect as each role — upstream, approver, auditor, worker —
// and check both what the role must be able to do and that the server
// refuses what it must not. The package has no code of its own.
package natsauth
