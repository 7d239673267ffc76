package config

import (
	"strings"

	"github.com/sluicegw/sluice/internal/alias"
)

// AliasesConfig maps client model names to served models with weights (internal/alias).
type AliasesConfig struct {
	// Rules are the --model-alias flags (alias=model[:weight],..., repeatable), changed live through
	// the admin API.
	Rules []alias.Rule
	// ExposeTarget answers with the served model's name in the response's model instead of the name
	// the client asked for (--model-alias-expose-target).
	ExposeTarget bool
}

func (s *flagSet) registerAliases() {
	s.section("Model aliases")
	s.add(aliasValue{&s.cfg.Aliases.Rules}, "model-alias", "ALIAS=MODEL[:W],...",
		"A model name clients may ask for and the served models behind it, with weights (default 1): "+
			"chat=llama-3.1-8b:90,llama-3.1-8b-rc:10 sends about 90 % of chat's requests to llama-3.1-8b. A request "+
			"with a session (--session-header, or a routing-key header) always gets the same target. Repeatable; "+
			"changed live through the admin API (/admin/v1/model_aliases).")
	s.bool(&s.cfg.Aliases.ExposeTarget, "model-alias-expose-target",
		"Answer an aliased request with the served model's name in model; by default the client gets back the name it asked for.")
}

// aliasValue is the repeatable --model-alias flag.
type aliasValue struct{ p *[]alias.Rule }

func (v aliasValue) String() string {
	if v.p == nil {
		return ""
	}
	parts := make([]string, len(*v.p))
	for i, r := range *v.p {
		parts[i] = r.String()
	}
	return strings.Join(parts, " ")
}

func (v aliasValue) Set(s string) error {
	r, err := alias.Parse(s)
	if err != nil {
		return err
	}
	*v.p = append(*v.p, r)
	return nil
}

// validateAliases refuses an alias given twice (the second would silently win).
func (c *Config) validateAliases(p *problems) {
	seen := map[string]bool{}
	for _, r := range c.Aliases.Rules {
		if seen[r.Alias] {
			p.add("--model-alias %s given twice", r.Alias)
		}
		seen[r.Alias] = true
	}
}
