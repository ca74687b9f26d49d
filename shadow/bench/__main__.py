from shadow.bench.cli import main

raise SystemExit(main())
