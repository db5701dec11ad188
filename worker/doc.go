// Package worker runs tasks as bounded, event-sourced loops.
//
// The data path of one run, each arrow an event appended to LOOPGATE_EVENTS
// before the next action is taken:
//
//	task (LOOPGATE_WORK) ─► intake ─► started
//	  loop: budgets ─► model ─► proposed
//	        each call: validated ─► (denied) ─► executing ─► executed
//	        then:      observed (one per call, handed back together)
//	  until a final answer or a stop ─► finished
//
// A Pool is a set of identical, stateless workers sharing one durable pull
// consumer. A worker that takes a message folds the run's events into state
// (events.Fold) and continues from exactly there, so any worker can take any
// run. Files: pool.go (consuming, leases, acks), outcome.go (failure
// classes mapped to acks), intake.go (task validation), run.go (the state
// machine), calls.go (validate, authorize, execute, observe), budget.go,
// decision.go (parsing the model's output) and observe.go (observations).
package worker
