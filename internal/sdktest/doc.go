// Package sdktest tests the Go SDK (client/) against real gateways over
// embedded etcd. It holds only tests: the SDK is its own module, which must
// not require the server's, so the tests that start a gateway live here, in
// the root module. They see the SDK's timing as an application does: on a
// fake clock (client.WithClock), through client.WithOnRenew and
// Client.RenewalsWaiting.
package sdktest
