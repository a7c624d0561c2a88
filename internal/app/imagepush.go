package app

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/distribution/reference"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/config"
)

// PushImage tags the sandbox image tag as ref and pushes it through the Docker engine
// named by cfg, writing the push's progress to progress, and returns the reference pushed.
// ref names a repository in a registry the nodes pull from (registry.example.com/team/
// sandpit-sandbox); without a tag the image's own tag (a hash of its recipe) is kept. The
// registry's credentials come from the Docker client's config file ($DOCKER_CONFIG/config.json
// or ~/.docker/config.json, as `docker login` writes them) when it holds them itself; with a
// credential helper (credsStore) push with `docker push` instead.
func PushImage(ctx context.Context, cfg config.Config, tag, ref string, progress io.Writer) (string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", fmt.Errorf("--push %q is not an image reference: %w; give one such as registry.example.com/sandpit-sandbox", ref, err)
	}
	if _, ok := named.(reference.Digested); ok {
		return "", fmt.Errorf("--push %q names a digest; give a repository, with a tag or without", ref)
	}
	if _, ok := named.(reference.Tagged); !ok {
		if named, err = reference.WithTag(named, ownTag(tag)); err != nil {
			return "", err
		}
	}
	api, err := DockerClient(cfg)
	if err != nil {
		return "", err
	}
	defer api.Close()
	return pushImage(ctx, api, tag, named, progress)
}

// pushImage tags the engine's image tag as target and pushes it, writing the push's
// progress to progress, and returns target as Docker names it. Errors name the image and
// say how to log in.
func pushImage(ctx context.Context, api client.APIClient, tag string, named reference.Named, progress io.Writer) (string, error) {
	target := reference.FamiliarString(named)
	if _, err := api.ImageTag(ctx, client.ImageTagOptions{Source: tag, Target: target}); err != nil {
		return "", fmt.Errorf("tagging %s as %s: %w", tag, target, err)
	}
	auth, err := registryAuth(reference.Domain(named))
	if err != nil {
		return "", err
	}
	resp, err := api.ImagePush(ctx, target, client.ImagePushOptions{RegistryAuth: auth})
	if err == nil {
		for m, merr := range resp.JSONMessages(ctx) {
			if merr != nil {
				err = merr
				break
			}
			if m.Error != nil {
				err = errors.New(m.Error.Message)
				break
			}
			if progress != nil && m.Status != "" && m.Progress == nil {
				fmt.Fprintf(progress, "%s %s\n", m.ID, m.Status)
			}
		}
	}
	if err != nil {
		return "", fmt.Errorf("pushing %s: %w (log in first with `docker login %s`; with a credential helper, push with `docker push %s`)",
			target, err, reference.Domain(named), target)
	}
	return target, nil
}

// ownTag is the tag part of image reference ref ("latest" when it has none).
func ownTag(ref string) string {
	_, own, _ := strings.Cut(ref[strings.LastIndexByte(ref, '/')+1:], ":")
	return cmp.Or(own, "latest")
}

// registryAuth returns the X-Registry-Auth value for domain from the Docker client's config
// file: the credentials `docker login` stored there, or empty ones when it holds none.
func registryAuth(domain string) (string, error) {
	dir := os.Getenv("DOCKER_CONFIG")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".docker")
	}
	var file struct {
		Auths map[string]struct {
			Auth          string `json:"auth"`
			IdentityToken string `json:"identitytoken"`
		} `json:"auths"`
	}
	ac := registry.AuthConfig{ServerAddress: domain}
	if data, err := os.ReadFile(filepath.Join(dir, "config.json")); err == nil {
		if err := json.Unmarshal(data, &file); err != nil {
			return "", fmt.Errorf("reading the Docker client's config %s: %w", filepath.Join(dir, "config.json"), err)
		}
		keys := []string{domain, "https://" + domain, "http://" + domain}
		if domain == "docker.io" {
			keys = append(keys, "https://index.docker.io/v1/")
		}
		for _, k := range keys {
			if e, ok := file.Auths[k]; ok {
				if raw, err := base64.StdEncoding.DecodeString(e.Auth); err == nil {
					ac.Username, ac.Password, _ = strings.Cut(string(raw), ":")
				}
				ac.IdentityToken = e.IdentityToken
				break
			}
		}
	}
	b, err := json.Marshal(ac)
	if err != nil {
		return "", err
	}
	return base64.URLEncoding.EncodeToString(b), nil
}
