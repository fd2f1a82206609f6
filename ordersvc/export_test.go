package ordersvc

// Waiting is how many handed-over commands wait for a worker's pass.
func Waiting(d *Dispatcher) int {
	d.runMu.Lock()
	defer d.runMu.Unlock()
	return len(d.handed)
}
