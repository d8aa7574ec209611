"""What a program outside the deployment uses to talk to it: the HTTP clients (`http`: `Client`,
`AsyncClient`), the job and the batch as their views show them (`job.Job`, `batch.Batch`) and the public
errors (`errors`). Importing this package imports nothing: `errors`, `job` and `batch` stay free of httpx,
which only `http` loads."""
