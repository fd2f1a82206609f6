package redis

import (
	"fmt"
	"strings"
)

// keys names every Redis key of a scheduler; no other code builds one.
//
// Per shard NN (00 to Shards-1), all on the Cluster slot of the hash tag {sNN}
// so that one script can touch them together:
//
//	<prefix>:{sNN}:due     ZSet  timer key -> Unix ms to deliver at (rounded up)
//	<prefix>:{sNN}:lease   ZSet  claim id -> lease deadline, Unix ms: one entry per claim in flight
//	<prefix>:{sNN}:claims  Hash  claim id -> the claim's timer keys (a cmsgpack array)
//	<prefix>:{sNN}:meta    Hash  timer key -> "<attempts>:<original due ms>:<claim id>",
//	                             only for timers in flight or waiting to be redelivered;
//	                             a timer belongs to the claim its meta names, whatever
//	                             claims lists (a schedule in flight drops its meta)
//	<prefix>:{sNN}:seeded  String "ok:<run id>" once a complete seed from the store covered the
//	                             shard, with the run id of the Redis process that held it then
//
// A claim costs lease and claims one entry each, whatever its size, and each
// of its timers one meta field. meta also holds, once a claim ran, a field no
// timer has (its name starts with a NUL byte; see lua/claim.lua) that keeps
// Redis from storing it as a listpack, whose lookups scan the whole hash.
//
// and, on a slot of its own:
//
//	<prefix>:seedlock      String the token of the instance seeding, with a TTL
type keys struct {
	prefix   string
	shards   []shardKeys
	seedLock string
}

// shardKeys are the keys of one shard.
type shardKeys struct {
	due, lease, claims, meta, seeded string
}

func newKeys(prefix string, shards int) keys {
	k := keys{prefix: prefix, shards: make([]shardKeys, shards), seedLock: prefix + ":seedlock"}
	for i := range k.shards {
		tag := fmt.Sprintf("%s:{s%02d}", prefix, i)
		k.shards[i] = shardKeys{due: tag + ":due", lease: tag + ":lease", claims: tag + ":claims", meta: tag + ":meta", seeded: tag + ":seeded"}
	}
	return k
}

// shard is the shard of a timer key: FNV-1a (32 bit) of the key modulo the
// number of shards. Every instance on a prefix must agree on it, so it never
// changes.
func (k keys) shard(key string) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % uint32(len(k.shards)))
}

// validPrefix reports what is wrong with a key prefix, or "".
func validPrefix(p string) string {
	switch {
	case p == "":
		return "must not be empty"
	case strings.ContainsAny(p, "{}"):
		return "must not contain '{' or '}': the shard's hash tag must be the first in its keys"
	}
	return ""
}

// ValidatePrefix returns what is wrong with a key prefix for Config.Prefix,
// or nil: a command line can check its flag before anything is dialled.
func ValidatePrefix(p string) error {
	if msg := validPrefix(p); msg != "" {
		return fmt.Errorf("redis: key prefix %q: %s", p, msg)
	}
	return nil
}
