package app

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/sluicegw/sluice/internal/tokenizer"
)

// loadTokenizers loads every --tokenizer-path directory at startup (a directory named twice is loaded
// once) and returns the lookup httpapi answers /tokenize with, or nil when none is configured. A
// directory that cannot be loaded stops startup: routing on a model's tokens must not silently fall
// back to text.
func loadTokenizers(paths map[string]string, logger *slog.Logger) (func(model string) *tokenizer.Tokenizer, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	byDir := map[string]*tokenizer.Tokenizer{}
	byModel := make(map[string]*tokenizer.Tokenizer, len(paths))
	for _, model := range slices.Sorted(maps.Keys(paths)) {
		dir := paths[model]
		tk, ok := byDir[dir]
		if !ok {
			start := time.Now()
			var err error
			if tk, err = tokenizer.Load(dir); err != nil {
				flag := dir
				if model != "" {
					flag = model + "=" + dir
				}
				return nil, fmt.Errorf("--tokenizer-path %s: %w", flag, err)
			}
			byDir[dir] = tk
			logger.Info("tokenizer loaded", "dir", dir, "chat_template", tk.HasChatTemplate(), "took", time.Since(start).Round(time.Millisecond))
		}
		byModel[model] = tk
	}
	fallback := byModel[""]
	return func(model string) *tokenizer.Tokenizer {
		if tk, ok := byModel[model]; ok && model != "" {
			return tk
		}
		return fallback
	}, nil
}
