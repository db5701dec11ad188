// Package toolsvc is a small library for writing a loopgate tool service in
// Go: a process that holds a tool's data and credentials and answers
// loopgate's calls over NATS request/reply, so the workers never hold
// them.
//
// A service is a nats.go micro service: it answers $SRV.PING, $SRV.INFO
// and $SRV.STATS, so `loopgate tools` and `nats micro ls` discover it, and
// every instance joins one queue group per endpoint, so starting more
// instances spreads the calls between them.
//
//	svc, err := toolsvc.New(nc, &toolsvc.Config{Name: "cityops-tools", Version: "1.0.0"})
//	err = svc.Add("get_procedure", "cityops.tools.get_procedure", handler,
//		toolsvc.ArgsSchema(schema))
//	err = svc.Start(ctx)
//	defer svc.Stop(ctx)
//
// A Handler gets the call's arguments and identity (Request) and a context
// that ends at the call's deadline. What it returns becomes the reply: a
// result is sent as {"result": …}; an error becomes a micro error reply
// whose code tells loopgate how to classify it — Transient (503) for a
// failure that had no effect and that a retry may cure, BadRequest (400),
// or any *Error; an error matching context.DeadlineExceeded (the
// handler's own deadline, an upstream's) is a 504, which loopgate records
// as an unknown outcome; anything else is a 500 whose details stay in this
// process's log, as is a panic in the handler, in its result's
// MarshalJSON or in its error's methods, and a typed nil *Error. The
// wire contract is in the README ("Remote tools").
package toolsvc
