package template

// SweepEvery lets the tests shorten how often images left to remove are tried again.
var SweepEvery = &sweepEvery
