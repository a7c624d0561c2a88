package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/httpapi/httpapitest"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// daemon stands for a running daemon in these examples: the real REST handler, called in
// process, over an executor that answers every run with run. A program would use
// client.New("http://127.0.0.1:7070", nil) instead.
func daemon(run func(req sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error)) *client.Client {
	ex := &httpapitest.Executor{Cfg: engine.DefaultConfig(),
		Fn: func(_ context.Context, req sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error) {
			return run(req, emit)
		}}
	return client.InProcess(httpapi.NewHandler(httpapi.Backend{Executor: ex}, nil))
}

// sum "runs" the examples' program: it prints the sum of INPUT and sets OUTPUT to it.
func sum(req sandbox.Request, emit func(sandbox.Event)) (sandbox.Result, error) {
	var xs []int
	_ = json.Unmarshal(req.Input, &xs)
	total := 0
	for _, x := range xs {
		total += x
	}
	out := fmt.Sprintf("%d\n", total)
	if emit != nil {
		emit(sandbox.Event{Stream: sandbox.StreamStdout, Data: out})
	}
	return sandbox.Result{ID: "ex_aaaaaaaaaaaaaaaaaaaaaaaaaa", Agent: "default", Outcome: sandbox.OutcomeOK, Success: true,
		Stdout: out, Output: json.RawMessage(fmt.Sprint(total)), DurationMS: 12, TimeoutMS: 30000,
		StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Start: sandbox.StartFork}, nil
}

// Run code and read its result: a program that fails is a result with its outcome, not an
// error.
func ExampleClient_Execute() {
	c := daemon(sum)
	res, err := c.Execute(context.Background(), apitype.ExecuteRequest{
		Code:  "OUTPUT = sum(INPUT); print(OUTPUT)",
		Input: json.RawMessage(`[1, 2, 3]`),
	}, nil)
	if err != nil {
		fmt.Println("refused:", err)
		return
	}
	fmt.Printf("outcome %s, stdout %q, OUTPUT %s, started %s\n", res.Outcome, res.Stdout, res.Output, res.Start)
	// Output: outcome ok, stdout "6\n", OUTPUT 6, started fork
}

// Stream the output as the program writes it: onEvent gets each chunk before the result.
func ExampleClient_Execute_stream() {
	c := daemon(sum)
	res, err := c.Execute(context.Background(), apitype.ExecuteRequest{Code: "print(sum(INPUT))", Input: json.RawMessage(`[4, 5]`)},
		func(ev apitype.Event) { fmt.Printf("%s: %q\n", ev.Stream, ev.Data) })
	if err != nil {
		fmt.Println("refused:", err)
		return
	}
	fmt.Println("outcome", res.Outcome)
	// Output:
	// stdout: "9\n"
	// outcome ok
}

// Tell refusals apart by their class: busy and not ready are worth a retry, an invalid
// request is not.
func ExampleAPIError() {
	c := daemon(func(sandbox.Request, func(sandbox.Event)) (sandbox.Result, error) {
		return sandbox.Result{}, &sandbox.BusyError{Slots: 4, Queue: 16, RetryAfter: 2 * time.Second}
	})
	_, err := c.Execute(context.Background(), apitype.ExecuteRequest{Code: "print(1)"}, nil)
	var api *client.APIError
	if errors.As(err, &api) {
		fmt.Println("code:", api.Code, "retry after:", api.RetryAfter)
	}
	fmt.Println("busy:", errors.Is(err, errclass.Busy), "invalid:", errors.Is(err, errclass.Invalid))
	// Output:
	// code: busy retry after: 2s
	// busy: true invalid: false
}
