package discovery

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// crdPath is the CRD of the pool types, which tests/kube installs into its API server.
const crdPath = "../../deploy/crds/inferencepool.yaml"

// schemaNode is the part of an OpenAPI v3 schema the check compares.
type schemaNode struct {
	Type                 string                `json:"type"`
	Properties           map[string]schemaNode `json:"properties"`
	Items                *schemaNode           `json:"items"`
	AdditionalProperties *schemaNode           `json:"additionalProperties"`
	Required             []string              `json:"required"`
}

type crdDoc struct {
	Spec struct {
		Group string `json:"group"`
		Scope string `json:"scope"`
		Names struct {
			Kind, ListKind, Plural string
		} `json:"names"`
		Versions []struct {
			Name    string `json:"name"`
			Served  bool   `json:"served"`
			Storage bool   `json:"storage"`
			Schema  struct {
				OpenAPIV3Schema schemaNode `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

// TestPoolCRDMatchesTypes holds deploy/crds/inferencepool.yaml and the Go types together: the CRD names
// the resource discovery watches, and its spec schema has exactly the Go types' JSON fields, with the
// same JSON types, and requires the fields the types do not mark omitempty.
func TestPoolCRDMatchesTypes(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(crdPath)
	if err != nil {
		t.Fatal(err)
	}
	var crd crdDoc
	if err := yaml.Unmarshal(raw, &crd); err != nil { // lenient: the CRD has fields the check does not compare
		t.Fatal(err)
	}
	s := crd.Spec
	if s.Group != PoolGroup || s.Scope != "Namespaced" || s.Names.Kind != PoolKind || s.Names.Plural != PoolResource || s.Names.ListKind != PoolKind+"List" {
		t.Fatalf("CRD names %s %s %+v, want %s Namespaced %s/%s", s.Group, s.Scope, s.Names, PoolGroup, PoolKind, PoolResource)
	}
	if len(s.Versions) != 1 || s.Versions[0].Name != PoolVersion || !s.Versions[0].Served || !s.Versions[0].Storage {
		t.Fatalf("CRD versions %+v, want one served storage version %s", s.Versions, PoolVersion)
	}
	spec, ok := s.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	if !ok {
		t.Fatal("CRD schema has no spec")
	}
	compareSchema(t, "spec", reflect.TypeFor[InferencePoolSpec](), spec)
}

// compareSchema checks node against the Go type t at path.
func compareSchema(t *testing.T, path string, typ reflect.Type, node schemaNode) {
	t.Helper()
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := map[reflect.Kind]string{
		reflect.Struct: "object", reflect.Map: "object", reflect.Slice: "array",
		reflect.String: "string", reflect.Int32: "integer", reflect.Int: "integer", reflect.Bool: "boolean",
	}[typ.Kind()]
	if node.Type != want {
		t.Errorf("%s: CRD type %q, Go %s wants %q", path, node.Type, typ, want)
		return
	}
	switch typ.Kind() {
	case reflect.Slice:
		if node.Items == nil {
			t.Errorf("%s: array without items", path)
			return
		}
		compareSchema(t, path+"[]", typ.Elem(), *node.Items)
	case reflect.Map:
		if node.AdditionalProperties == nil {
			t.Errorf("%s: map without additionalProperties", path)
			return
		}
		compareSchema(t, path+"{}", typ.Elem(), *node.AdditionalProperties)
	case reflect.Struct:
		var names, required []string
		for f := range typ.Fields() {
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				t.Errorf("%s.%s: no JSON name", path, f.Name)
				continue
			}
			names = append(names, name)
			if !strings.Contains(opts, "omitempty") {
				required = append(required, name)
			}
			sub, ok := node.Properties[name]
			if !ok {
				t.Errorf("%s.%s: in the Go type, not in the CRD", path, name)
				continue
			}
			compareSchema(t, path+"."+name, f.Type, sub)
		}
		for name := range node.Properties {
			if !slices.Contains(names, name) {
				t.Errorf("%s.%s: in the CRD, not in the Go type", path, name)
			}
		}
		slices.Sort(required)
		got := slices.Sorted(slices.Values(node.Required))
		if !slices.Equal(got, required) {
			t.Errorf("%s: CRD requires %v, the Go type (fields without omitempty) %v", path, got, required)
		}
	}
}
