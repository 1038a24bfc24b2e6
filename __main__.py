from stepcritic.cli import main

raise SystemExit(main())
