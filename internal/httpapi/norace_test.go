//go:build !race

package httpapi_test

// raceSlowdown scales the time bounds of tests under the race detector (1 without it).
const raceSlowdown = 1
