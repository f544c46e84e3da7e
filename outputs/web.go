package outputs

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"net/http"
)

// web holds the graph page and the layout library it runs: dagre 3.1.3 (bundling graphlib
// 4.0.6, both MIT), embedded byte for byte as npm ships it; web/fetch-dagre.sh re-fetches it
// and checks it.
//
//go:embed web/graph.html web/dagre.min.js web/LICENSE.dagre web/LICENSE.graphlib
var web embed.FS

// DagreSHA256 is the digest of the embedded dagre.min.js: the pin a test holds the file to.
const DagreSHA256 = "54a503e346f93ca0bb10abe7999587e037262935687aca45eb4e4b0f64bbb578"

// Page is the HTML view of /debug/krt (?format=html).
var Page = mustRead("web/graph.html")

var dagreJS = mustRead("web/dagre.min.js")

func mustRead(name string) string {
	b, err := web.ReadFile(name)
	if err != nil {
		panic(fmt.Sprintf("embedded %s: %v", name, err)) // the build embeds it; missing means a broken build
	}
	return string(b)
}

// dagreDigest is the sha256 of the embedded layout library.
func dagreDigest() string {
	s := sha256.Sum256([]byte(dagreJS))
	return hex.EncodeToString(s[:])
}

// serveDagre serves the embedded layout library to the graph page.
func serveDagre(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	w.Header().Set("Cache-Control", "max-age=3600")
	fmt.Fprint(w, dagreJS)
}

// serveLicenses serves the licences of what the graph page embeds.
func serveLicenses(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, "The graph page (/debug/krt?format=html) runs dagre 3.1.3, which bundles graphlib 4.0.6.\n\n== dagre ==\n")
	fmt.Fprint(w, mustRead("web/LICENSE.dagre"))
	fmt.Fprint(w, "\n== graphlib ==\n")
	fmt.Fprint(w, mustRead("web/LICENSE.graphlib"))
}
