// Package ui is the gateway's web console, served at /ui/ on the API's
// port: a fleet overview (shards, breakers, held and waiting counts,
// keepalive rate, handoff latency), a lock table and a page per lock with
// its live queue and, for admins, a force release.
//
// The front end is plain JavaScript modules embedded in the binary (no
// build step, nothing fetched at run time), served under a strict Content
// Security Policy. It talks to the gateway's own APIs from the browser —
// Connect with JSON, unary and streaming — with the caller's bearer token,
// plus one JSON endpoint of its own, GET /ui/api/overview, for figures no
// RPC carries. docs/console.md describes the pages and how the browser
// tests run.
package ui
