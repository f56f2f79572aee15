// Package modules checks the repository's module layout: the SDK (client/),
// the fencing library (fence/) and the generated API (proto/) are modules of
// their own, so that a program importing the SDK or fence resolves a small
// dependency set, and the root module's `go test ./...` still vets and
// tests them. It holds only tests.
package modules
