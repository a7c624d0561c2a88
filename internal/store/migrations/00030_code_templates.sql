-- The template whose sandbox runs each version of saved code (Code.Template); NULL for the
-- daemon's own image.

-- +goose Up
ALTER TABLE code_versions ADD COLUMN template TEXT;

-- +goose Down
ALTER TABLE code_versions DROP COLUMN template;
