package locks

import "errors"

// ErrUnknownShard reports a shard name (from a lock or session id) that is
// not a cluster of the map this process follows.
var ErrUnknownShard = errors.New("unknown shard")
