package queue

import "fmt"

// Fencing tokens.
//
// A fencing token is an int64:
//
//	token = epoch << 48 | create revision of the holder's key
//
// The create revision comes from etcd's single, cluster-wide revision
// counter; the holder of a name is the waiter with the lowest create
// revision, and every later waiter was created after it, so successive
// holders of a name carry strictly increasing revisions. The epoch is the
// shard-map epoch the waiter was enqueued under; when a name moves to
// another cluster the epoch grows, so its tokens keep growing across
// clusters. 48 bits of revision last about 90 years at 100K writes/s.
//
// Tokens stay below 2^53, exact in JSON numbers, while the epoch is below 32.
const (
	// EpochShift is the bit position of the epoch in a fencing token.
	EpochShift = 48
	// MaxEpoch is the largest epoch a token can carry.
	MaxEpoch = 1<<15 - 1
	revMask  = 1<<EpochShift - 1
)

// Token builds a fencing token from an epoch and a create revision.
func Token(epoch uint16, revision int64) int64 {
	return int64(epoch)<<EpochShift | revision&revMask
}

// SplitToken returns a token's epoch and create revision.
func SplitToken(token int64) (epoch uint16, revision int64, err error) {
	if token <= 0 {
		return 0, 0, fmt.Errorf("%w: fencing token %d is not positive", ErrInvalidArgument, token)
	}
	return uint16(token >> EpochShift), token & revMask, nil
}
