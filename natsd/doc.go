// Package natsd runs a real nats-server with JetStream inside the loopgate
// process, so `loopgate serve` works on a laptop with no NATS installed.
//
// Start it with a StoreDir (the JetStream file store survives restarts) and
// talk to it with Connect, which uses an in-process connection instead of
// loopback TCP; other processes reach it at ClientURL. The server's own log
// lines go to a *slog.Logger: warnings and errors at their levels, the
// server's notices (its startup banner and the like) at Debug, so an
// embedded server is quiet unless something is wrong.
//
// With Config.ConfigFile the server starts from a nats-server
// configuration file: accounts, users and their permissions, TLS (see
// deploy/nats-accounts.conf). Clients then authenticate, Connect's
// in-process ones included (pass nats.UserInfo or the like); TLS is never
// required in process.
//
// Durability: the embedded default is SyncInterval "always", an fsync per
// write, because the events stream is loopgate's audit log. With a duration
// instead (the nats-server default is "2m") an OS crash or power loss can
// lose writes the server already acknowledged.
package natsd
