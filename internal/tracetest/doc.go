// Package tracetest holds the end-to-end test of tracing: one fire through the real services
// (the all-in-one stack and a jobmesh-agent process) exports its spans over OTLP to a receiver in
// the test, which checks that the fire is one trace from the scheduler to the agent to logsvc.
// It is a package of its own because it installs the process's global tracer provider.
package tracetest
