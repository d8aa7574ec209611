"""What a program outside the deployment uses to talk to it: the HTTP clients (`http`: `Client`,
`AsyncClient`), the job as its view shows it (`job.Job`) and the public errors (`errors`). Importing this
package imports nothing: `errors` and `job` stay free of httpx, which only `http` loads."""
