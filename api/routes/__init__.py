"""The API's routes: thin functions that check the caller and call the job store."""
