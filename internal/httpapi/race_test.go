//go:build race

package httpapi_test

// raceSlowdown scales the time bounds of tests under the race detector, which slows code
// several times over.
const raceSlowdown = 5
