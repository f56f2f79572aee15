package leasegatev1

// Facts of the leasegate.v1 API that protobuf cannot state as constants.
// The gateway and the lock engine enforce and write them; the SDK checks
// and reads them. lock.proto's field comments give the same limits in
// prose, and errors.proto describes the ErrorInfo they belong to.
const (
	// ErrorDomain is the domain of the google.rpc.ErrorInfo detail that
	// carries an ErrorReason.
	ErrorDomain = "leasegate.dev"
	// MetadataShard is the ErrorInfo metadata key naming the shard an error
	// concerns (SESSION_SHARD_MISSING, and SESSION_LOST on an acquire or a
	// keepalive).
	MetadataShard = "shard"
	// MetadataLimit is the ErrorInfo metadata key naming the limit that
	// refused a call (RATE_LIMITED, QUOTA_EXCEEDED): errors.proto lists
	// the values.
	MetadataLimit = "limit"
	// MaxNameBytes is the longest lock name, in bytes.
	MaxNameBytes = 256
	// MaxIDBytes is the longest client_id or request_id, in bytes.
	MaxIDBytes = 128
	// MaxValueBytes is the longest election value (CampaignRequest.value,
	// ProclaimRequest.value), in bytes.
	MaxValueBytes = 4096
	// MaxSemaphoreLimit is the largest AcquireRequest.limit: the engine
	// reads a semaphore's first `limit` keys in its enqueue transaction.
	MaxSemaphoreLimit = 1000
	// MaxLockDelayMs is the longest AcquireRequest.lock_delay_ms.
	MaxLockDelayMs = 60000
)
