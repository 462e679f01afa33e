package console

import (
	_ "embed"
	"html/template"
)

//go:embed templates.html
var templatesHTML string

// templates are the console's pages, parsed once; html/template escapes
// every value by its context, so event types, errors and payloads cannot
// inject markup.
var templates = template.Must(template.New("console").Parse(templatesHTML))
