package containers_test

import (
	"context"
	"fmt"
	"log"

	"github.com/sentinel-coordination/sentinel/sentineltest/containers"
)

// Start on its own: a PostgreSQL container for something other than
// sentineltest (a demo, a benchmark). Tests only need the blank import:
//
//	import _ "github.com/sentinel-coordination/sentinel/sentineltest/containers"
func ExampleStart() {
	url, stop, err := containers.Start(context.Background(), log.Printf)
	if err != nil {
		log.Fatal(err) // errors.Is(err, sentineltest.ErrNoContainerEngine) when Docker is not there
	}
	defer stop()
	fmt.Println(url)
}
