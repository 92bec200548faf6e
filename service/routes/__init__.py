"""HTTP routes: thin handlers (schema in -> core function -> schema out)."""
