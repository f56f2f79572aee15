// Package conformance runs the SDK conformance harness: one embedded etcd
// member and four leasegate gateways over it (three behind counting
// fronts, one that takes callers by client certificate), on loopback
// addresses only, and a control API that scenarios drive (stop and start a
// gateway, count the requests it received and the tokens they carried,
// tell when each arrived and whether it was answered without error,
// check a write against a fencing guard, raise the fleet's epoch so tokens
// pass 2^53, align etcd's revision so a token is odd). The scenarios themselves are
// data, in sdk/conformance/scenarios.json; each SDK has a small runner
// that interprets them. sdk/conformance/README.md is the contract between
// the harness, the scenarios and the runners.
//
// Every SDK is judged against the same gateways, the same etcd and the same
// scenarios, so a behaviour the Go SDK is held to is a behaviour every SDK
// is held to.
package conformance
