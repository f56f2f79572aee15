// Package k6 holds leasegate's k6 load-test scripts (rest.js, connect.js,
// grpc_stream.js) and the request shapes they send (shapes.json). It has no
// Go code of its own: its tests check the scripts' syntax with node and
// replay their requests against a real in-process gateway. See README.md.
package k6
