package redis

import (
	_ "embed"

	goredis "github.com/redis/go-redis/v9"
)

// The Lua scripts, each with its contract in its header. go-redis runs them
// with EVALSHA and falls back to EVAL when the server does not have them
// cached (a restart, SCRIPT FLUSH, a new Cluster node).
var (
	//go:embed lua/schedule.lua
	scheduleLua    string
	scheduleScript = goredis.NewScript(scheduleLua)

	//go:embed lua/unschedule.lua
	unscheduleLua    string
	unscheduleScript = goredis.NewScript(unscheduleLua)

	//go:embed lua/claim.lua
	claimLua    string
	claimScript = goredis.NewScript(claimLua)

	//go:embed lua/ack.lua
	ackLua    string
	ackScript = goredis.NewScript(ackLua)

	//go:embed lua/retry.lua
	retryLua    string
	retryScript = goredis.NewScript(retryLua)

	//go:embed lua/extend.lua
	extendLua    string
	extendScript = goredis.NewScript(extendLua)

	//go:embed lua/recover.lua
	recoverLua    string
	recoverScript = goredis.NewScript(recoverLua)

	//go:embed lua/lock.lua
	lockLua    string
	lockScript = goredis.NewScript(lockLua)

	//go:embed lua/seeded.lua
	seededLua    string
	seededScript = goredis.NewScript(seededLua)
)
