package drain

import (
	"math/rand/v2"
	"time"
)

// Jitter is d ±20%, so that workers of several instances do not retry in step.
func Jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}
