package app_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestPushImage tags an image for a registry and pushes it there through the Docker engine; the
// registry here is a closed port, so the push fails, naming the reference and docker login,
// after the tag (with the image's own tag kept) was made.
func TestPushImage(t *testing.T) {
	base := testenv.BaseImage(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	registry := ln.Addr().String()
	ln.Close()
	cfg := config.Default()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, tag, _ := strings.Cut(base, ":")
	want := registry + "/kwire/sandpit-sandbox:" + tag
	api := testenv.DockerClient(t)
	t.Cleanup(func() { _, _ = api.ImageRemove(context.Background(), want, client.ImageRemoveOptions{}) })

	_, err = app.PushImage(ctx, cfg, base, registry+"/kwire/sandpit-sandbox", nil)
	if err == nil || !strings.Contains(err.Error(), "pushing "+want) || !strings.Contains(err.Error(), "docker login "+registry) {
		t.Fatalf("PushImage to a closed registry = %v, want an error naming %s and docker login", err, want)
	}
	if _, err := api.ImageInspect(ctx, want); err != nil {
		t.Errorf("the tag %s was not made: %v", want, err)
	}
	if _, err := app.PushImage(ctx, cfg, base, "Not A Reference", nil); err == nil || !strings.Contains(err.Error(), "is not an image reference") {
		t.Errorf("PushImage of a bad reference = %v", err)
	}
}
