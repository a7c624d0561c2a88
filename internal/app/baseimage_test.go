package app_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/config"
)

// imagesEngine is an engine that has only the images named.
type imagesEngine struct {
	client.APIClient
	images []string
}

func (e imagesEngine) ImageInspect(_ context.Context, image string, _ ...client.ImageInspectOption) (client.ImageInspectResult, error) {
	if slices.Contains(e.images, image) {
		return client.ImageInspectResult{}, nil
	}
	return client.ImageInspectResult{}, errors.New("no such image")
}

// TestChooseBaseImage: with base_image unset, the base is chosen as the tests choose theirs, so
// that after the quickstart built the offline base, serve, doctor, setup and run use it without
// SANDPIT_BASE_IMAGE (they defaulted to python:3.11-slim and failed).
func TestChooseBaseImage(t *testing.T) {
	cases := []struct {
		set    string
		images []string
		want   string
	}{
		{"", []string{config.OfflineBaseImage}, config.OfflineBaseImage},
		{"", []string{config.RegistryBaseImage, config.OfflineBaseImage}, config.RegistryBaseImage},
		{"", nil, config.RegistryBaseImage},
		{"python:3.13-slim", []string{config.OfflineBaseImage}, "python:3.13-slim"},
	}
	for _, c := range cases {
		cfg := config.Default()
		cfg.BaseImage = c.set
		if got := app.ChooseBaseImage(context.Background(), imagesEngine{images: c.images}, cfg).BaseImage; got != c.want {
			t.Errorf("base_image %q, engine has %v: chose %q, want %q", c.set, c.images, got, c.want)
		}
	}
}
