package cron_test

import (
	"fmt"
	"time"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/cron"
)

func ExampleParse() {
	e, err := cron.Parse("0 15 10 ? * 6L") // 10:15 on the last Friday of every month
	if err != nil {
		fmt.Println(err)
		return
	}
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		fmt.Println(err)
		return
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 3 {
		at, _ = e.Next(at, shanghai)
		fmt.Println(at)
	}

	_, err = cron.Parse("0 15 10 32 * ?")
	fmt.Println(err)
	// Output:
	// 2026-01-30 10:15:00 +0800 CST
	// 2026-02-27 10:15:00 +0800 CST
	// 2026-03-27 10:15:00 +0800 CST
	// cron: day-of-month field "32": value 32 out of range 1-31
}
